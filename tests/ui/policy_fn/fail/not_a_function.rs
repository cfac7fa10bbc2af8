use portcullis::input_policy;

#[input_policy]
struct NoSsn;

fn main() {}
