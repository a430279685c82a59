fn main() {
    xnf_build::skeletons(&["gen", "sink", "actions"]);
}
