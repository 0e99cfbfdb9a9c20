//! The base64url engine of the hot paths: unpadded, canonical (no trailing
//! bits, no padding accepted), exactly as
//! [`URL_SAFE_NO_PAD`](base64::engine::general_purpose::URL_SAFE_NO_PAD), but
//! with the base64 crate's SIMD kernels (AVX2 on x86-64, NEON on aarch64)
//! when the CPU has them, chosen once at first use. Elsewhere, or on a CPU
//! without them, the scalar engine.

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod engine {
    use base64::engine::general_purpose::NO_PAD;
    use base64::engine::simd::Simd;
    use std::sync::LazyLock;

    /// The engine (see the module docs).
    pub(crate) static B64URL: LazyLock<Simd> = LazyLock::new(|| Simd::url_safe(NO_PAD));
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
mod engine {
    /// The engine (see the module docs).
    pub(crate) use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
}

pub(crate) use engine::B64URL;
