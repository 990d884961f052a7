//! Small serde helpers shared by the section types.

use serde::{Deserialize, Deserializer};

/// A present-but-null value takes the type's default (§1.3: `models:` with only comments).
pub(crate) fn null_default<'de, D, T>(de: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(de)?.unwrap_or_default())
}

/// `config_version`: an integer, anything else counts as 0 (§1.4).
pub(crate) fn lenient_version<'de, D: Deserializer<'de>>(de: D) -> Result<i64, D::Error> {
    let value = serde_json::Value::deserialize(de)?;
    Ok(value.as_i64().unwrap_or(0))
}

/// `max_recursion_limit`: null means the default (1000).
pub(crate) fn recursion_limit<'de, D: Deserializer<'de>>(de: D) -> Result<usize, D::Error> {
    Ok(Option::<usize>::deserialize(de)?.unwrap_or(crate::DEFAULT_MAX_RECURSION_LIMIT))
}

/// `tool_search.auto_promote_top_k`: clamped (not rejected) to 1–5 (§26.7).
pub(crate) fn clamp_top_k<'de, D: Deserializer<'de>>(de: D) -> Result<usize, D::Error> {
    let raw = i64::deserialize(de)?;
    // The clamp keeps the value in 1..=5, so the cast cannot truncate.
    Ok(raw.clamp(1, 5) as usize)
}

pub(crate) fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// A config section: the struct and its `Default`, each field's default written next to the
/// field (`pub name: Type = default,`) instead of once more in a hand-written `impl Default`.
/// Sections derive `Debug, Clone, PartialEq, Serialize, Deserialize` and take `#[serde(default)]`
/// (absent keys get the same defaults); a section that needs other derives or its own
/// `Deserialize` starts with `plain:` and lists its attributes itself.
macro_rules! section {
    (
        plain:
        $(#[$meta:meta])*
        pub struct $name:ident {
            $(
                $(#[$field_meta:meta])*
                pub $field:ident: $ty:ty = $default:expr
            ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        pub struct $name {
            $(
                $(#[$field_meta])*
                pub $field: $ty,
            )*
        }

        impl Default for $name {
            fn default() -> Self {
                Self {
                    $($field: $default,)*
                }
            }
        }
    };
    ($(#[$meta:meta])* pub struct $($rest:tt)*) => {
        $crate::de::section! {
            plain:
            $(#[$meta])*
            #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
            #[serde(default)]
            pub struct $($rest)*
        }
    };
}
pub(crate) use section;
