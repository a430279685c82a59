fn main() {
    xnf_build::skeletons(&["afxdp"]);
}
