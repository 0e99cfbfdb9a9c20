//! Gives the shared library a versioned SONAME on Linux, as C packaging
//! expects: `libworkload_identity.so.1`, after the C ABI version (additive-only
//! changes keep it; `scripts/c-install-check.sh` checks the two agree).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libworkload_identity.so.1");
    }
}
