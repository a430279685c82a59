fn main() {
    xnf_build::skeletons(&["pass", "reflect"]);
}
