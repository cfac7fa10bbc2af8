//! Sets up the N-API configuration of the addon.

fn main() {
    napi_build::setup();
}
