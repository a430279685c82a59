fn main() {
    xnf_build::skeletons(&["parse_probe"]);
}
