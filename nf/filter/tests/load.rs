use xnf_filter::program::FilterProgram;
#[test]
fn loads() {
    FilterProgram::load(None, None).unwrap();
}
