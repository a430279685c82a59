fn main() {
    xnf_build::skeletons(&["lb", "decap"]);
}
