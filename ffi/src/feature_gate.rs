//! Entry points whose work needs a cargo feature of this crate (`vault`,
//! `consul`, `remote-jwks`): their symbols are in every build, so that a C
//! program links against any build, and without the feature each call
//! fails with an error naming it.

/// Runs `$imp` in a build with cargo feature `$feature`; without it, the
/// result is `Err($absent)`. The arguments listed are there only to be
/// used in the build without the feature (they are the entry point's own).
macro_rules! with_feature {
    ($feature:literal, $absent:expr, ($($arg:expr),*) => $imp:expr) => {{
        #[cfg(feature = $feature)]
        let result = $imp;
        #[cfg(not(feature = $feature))]
        let result = {
            let _ = ($($arg,)*);
            Err($absent)
        };
        result
    }};
}
pub(super) use with_feature;
