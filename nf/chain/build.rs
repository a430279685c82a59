fn main() {
    xnf_build::skeletons(&["chain"]);
}
