fn main() {
    xnf_build::skeletons(&["filter"]);
}
