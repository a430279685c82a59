//! `xnf-cni`: the CNI plugin that makes pods network functions (see
//! `xnf_chain::cni`). Installed into the runtime's plugin directory
//! (`/opt/cni/bin`) and listed after a main plugin in a `.conflist`.

fn main() {
    std::process::exit(xnf_chain::cni::main())
}
