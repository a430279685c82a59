fn main() {
    xnf_build::skeletons(&["stages", "sample"]);
}
