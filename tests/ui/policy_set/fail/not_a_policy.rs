use portcullis::policy_set;

struct Settings;

fn main() {
    let _ = policy_set! {
        input: [Settings, "no_ssn"],
    };
}
