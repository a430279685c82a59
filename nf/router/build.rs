fn main() {
    xnf_build::skeletons(&["router"]);
}
