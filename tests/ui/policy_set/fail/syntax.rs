use portcullis::policy_set;

fn main() {
    let _ = policy_set! { input [] };
}
