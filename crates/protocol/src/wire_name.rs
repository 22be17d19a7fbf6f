//! Closed sets of names that travel as text (on the wire, in a stored column), declared once:
//! each variant beside its name, and from that list its `ALL`, `as_str`, `parse`, `Display`
//! and serde by name.
//!
//! `parse` is `None` for a name the list lacks rather than an error of this crate's: what an
//! unknown name means (a newer peer's word, a corrupt row) is the caller's to say.

/// Declares `pub enum $name` from `Variant = "name"` lines; `$what` completes the serde error
/// "`"x"` is not …".
macro_rules! wire_names {
    (
        $(#[$meta:meta])*
        pub enum $name:ident: $what:literal {
            $($(#[$doc:meta])* $variant:ident = $text:literal,)*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $($(#[$doc])* $variant,)*
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];

            /// The name as it travels and is stored.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)*
                }
            }

            /// The value named `text` exactly; `None` for a name this version does not know.
            pub fn parse(text: &str) -> Option<$name> {
                match text {
                    $($text => Some($name::$variant),)*
                    _ => None,
                }
            }
        }

        impl ::core::fmt::Display for $name {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(
                deserializer: D,
            ) -> Result<Self, D::Error> {
                let text = <String as ::serde::Deserialize>::deserialize(deserializer)?;
                $name::parse(&text).ok_or_else(|| {
                    ::serde::de::Error::custom(format!(concat!("{:?} is not ", $what), text))
                })
            }
        }
    };
}

pub(crate) use wire_names;

/// What every set declared with [`wire_names`] must satisfy: each name parses back to its value
/// and crosses serde as the bare string, and no name is used twice.
#[cfg(test)]
pub(crate) fn assert_round_trips<T>(
    all: &[T],
    as_str: fn(T) -> &'static str,
    parse: fn(&str) -> Option<T>,
) where
    T: Copy
        + PartialEq
        + core::fmt::Debug
        + core::fmt::Display
        + serde::Serialize
        + serde::de::DeserializeOwned,
{
    for (i, &value) in all.iter().enumerate() {
        let name = as_str(value);
        assert_eq!(parse(name), Some(value), "{name}");
        assert_eq!(value.to_string(), name);
        let wire = serde_json::to_value(value).expect("serializes");
        assert_eq!(wire, serde_json::Value::from(name));
        assert_eq!(
            serde_json::from_value::<T>(wire).expect("deserializes"),
            value
        );
        assert!(
            all[i + 1..].iter().all(|&other| as_str(other) != name),
            "{name} twice"
        );
    }
}
