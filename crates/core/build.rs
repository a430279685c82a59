fn main() {
    xnf_build::skeletons(&["abi", "entry"]);
}
