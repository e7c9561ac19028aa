//! Record libtorch's folder in every test, example and chapter binary (rpath),
//! so that they run without LD_LIBRARY_PATH. `LIBTORCH` comes from the
//! environment or from .cargo/config.toml. The exercises crate and the
//! chapter runner use this same file as their build script.
fn main() {
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    if let Some(dir) = std::env::var_os("LIBTORCH") {
        let lib = std::path::Path::new(&dir).join("lib");
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
    }
}
