//! Validated policy and scope identifiers, and store names.
//!
//! Identifiers end up in storage keys, HMAC inputs, metrics labels, log lines and
//! HTTP `RateLimit-Policy` names, so they use a deliberately small alphabet that is
//! safe in every one of those places without escaping. Store names, in metrics
//! labels and log lines, use the same.

use std::{fmt, str::FromStr, sync::Arc};

/// The maximum length of a [`PolicyId`], [`ScopeId`] or [`StoreName`], in
/// bytes.
pub const MAX_ID_LEN: usize = 64;

/// Which kind of identifier an [`IdError`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum IdKind {
    /// A [`PolicyId`].
    Policy,
    /// A [`ScopeId`].
    Scope,
    /// A [`StoreName`].
    Store,
}

impl fmt::Display for IdKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Policy => "policy id",
            Self::Scope => "scope id",
            Self::Store => "store name",
        })
    }
}

/// Why a string was refused as a [`PolicyId`], [`ScopeId`] or [`StoreName`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdError {
    /// The identifier was empty.
    #[error("{kind} must not be empty")]
    Empty {
        /// Which identifier was refused.
        kind: IdKind,
    },
    /// The identifier was longer than [`MAX_ID_LEN`] bytes.
    #[error("{kind} is {length} bytes long; at most {maximum} are allowed")]
    TooLong {
        /// Which identifier was refused.
        kind: IdKind,
        /// The refused length in bytes.
        length: usize,
        /// [`MAX_ID_LEN`].
        maximum: usize,
    },
    /// The identifier contained a byte outside `A-Z a-z 0-9 . _ -`.
    #[error("{kind} has a character outside [A-Za-z0-9._-] at byte {position}")]
    InvalidCharacter {
        /// Which identifier was refused.
        kind: IdKind,
        /// Byte offset of the first refused character.
        position: usize,
    },
}

fn validate(kind: IdKind, value: &str) -> Result<(), IdError> {
    if value.is_empty() {
        return Err(IdError::Empty { kind });
    }
    if value.len() > MAX_ID_LEN {
        return Err(IdError::TooLong {
            kind,
            length: value.len(),
            maximum: MAX_ID_LEN,
        });
    }
    match value
        .bytes()
        .position(|b| !(b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')))
    {
        Some(position) => Err(IdError::InvalidCharacter { kind, position }),
        None => Ok(()),
    }
}

macro_rules! identifier {
    ($(#[$meta:meta])* $name:ident, $kind:expr) => {
        $(#[$meta])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(Arc<str>);

        impl $name {
            /// Validates `value`: 1 to [`MAX_ID_LEN`] bytes of `A-Z a-z 0-9 . _ -`.
            ///
            /// # Errors
            ///
            /// Returns an [`IdError`] naming the first rule `value` breaks.
            pub fn new(value: impl AsRef<str>) -> Result<Self, IdError> {
                let value = value.as_ref();
                validate($kind, value)?;
                Ok(Self(Arc::from(value)))
            }

            /// The identifier as a string slice.
            #[must_use]
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_tuple(stringify!($name)).field(&&*self.0).finish()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl FromStr for $name {
            type Err = IdError;

            fn from_str(value: &str) -> Result<Self, Self::Err> {
                Self::new(value)
            }
        }

        impl TryFrom<&str> for $name {
            type Error = IdError;

            fn try_from(value: &str) -> Result<Self, Self::Error> {
                Self::new(value)
            }
        }

        impl TryFrom<String> for $name {
            type Error = IdError;

            fn try_from(value: String) -> Result<Self, Self::Error> {
                Self::new(value)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        #[cfg(feature = "serde")]
        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.0)
            }
        }

        #[cfg(feature = "serde")]
        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let value = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
                Self::new(&*value).map_err(serde::de::Error::custom)
            }
        }
    };
}

identifier!(
    /// Names a rate-limit policy, such as `auth.login` or `api.read`.
    ///
    /// A policy id is part of every derived subject key and policy fingerprint, and
    /// is what metrics and HTTP `RateLimit-Policy` fields call the policy. It holds
    /// 1 to [`MAX_ID_LEN`] bytes of ASCII letters, digits, `.`, `_` and `-`: a set
    /// that needs no escaping in storage keys, metric labels, logs or Structured
    /// Field strings.
    ///
    /// # Examples
    ///
    /// ```
    /// use runlimit_core::PolicyId;
    ///
    /// let id = PolicyId::new("auth.login")?;
    /// assert_eq!(id.as_str(), "auth.login");
    /// assert!(PolicyId::new("auth login").is_err());
    /// # Ok::<(), runlimit_core::IdError>(())
    /// ```
    PolicyId,
    IdKind::Policy
);

identifier!(
    /// Names what a policy counts per subject, such as `client` or `identity`.
    ///
    /// Two policies with one [`PolicyId`] and different scopes keep separate
    /// counters and derive different subject keys from the same subject bytes. The
    /// alphabet and length bound are the same as [`PolicyId`]'s.
    ///
    /// # Examples
    ///
    /// ```
    /// use runlimit_core::ScopeId;
    ///
    /// let scope: ScopeId = "identity".parse()?;
    /// assert_eq!(scope.to_string(), "identity");
    /// # Ok::<(), runlimit_core::IdError>(())
    /// ```
    ScopeId,
    IdKind::Scope
);

identifier!(
    /// Names a store in what it reports, such as `login` or `api`: the
    /// `store` label of its capacity gauges and the `store` field of its
    /// capacity events, so that two stores in one process report apart.
    ///
    /// It names the application's store, never a subject. The alphabet and
    /// length bound are the same as [`PolicyId`]'s; the
    /// [default](Self::default) is `default`.
    ///
    /// # Examples
    ///
    /// ```
    /// use runlimit_core::StoreName;
    ///
    /// let name = StoreName::new("login")?;
    /// assert_eq!(name.as_str(), "login");
    /// assert_eq!(StoreName::default().as_str(), "default");
    /// assert!(StoreName::new("login store").is_err());
    /// # Ok::<(), runlimit_core::IdError>(())
    /// ```
    StoreName,
    IdKind::Store
);

impl Default for StoreName {
    /// `default`: the name of a store the application did not name.
    fn default() -> Self {
        Self(Arc::from(DEFAULT_STORE_NAME))
    }
}

/// The name of a store the application did not name.
pub(crate) const DEFAULT_STORE_NAME: &str = "default";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_documented_alphabet() {
        let all = "AZaz09._-";
        assert_eq!(
            PolicyId::new(all).map(|id| id.to_string()),
            Ok(all.to_owned())
        );
        let longest = "a".repeat(MAX_ID_LEN);
        assert!(ScopeId::new(&longest).is_ok());
    }

    #[test]
    fn rejects_empty_long_and_foreign_characters() {
        assert_eq!(
            PolicyId::new(""),
            Err(IdError::Empty {
                kind: IdKind::Policy
            })
        );
        assert_eq!(
            ScopeId::new("a".repeat(MAX_ID_LEN + 1)),
            Err(IdError::TooLong {
                kind: IdKind::Scope,
                length: MAX_ID_LEN + 1,
                maximum: MAX_ID_LEN
            })
        );
        for (input, position) in [("a b", 1), ("a/b", 1), ("é", 0), ("ok:", 2), ("x\n", 1)] {
            assert_eq!(
                PolicyId::new(input),
                Err(IdError::InvalidCharacter {
                    kind: IdKind::Policy,
                    position
                }),
                "{input:?}"
            );
        }
    }

    #[test]
    fn display_from_str_and_as_ref_agree() {
        let id: PolicyId = "api.read".parse().expect("valid");
        assert_eq!(id.as_ref(), "api.read");
        assert_eq!(format!("{id}"), "api.read");
        assert_eq!(format!("{id:?}"), "PolicyId(\"api.read\")");
        assert_eq!(
            "bad id".parse::<ScopeId>().map_err(|e| e.to_string()),
            Err("scope id has a character outside [A-Za-z0-9._-] at byte 3".to_owned())
        );
        assert_eq!(
            StoreName::new("").map_err(|e| e.to_string()),
            Err("store name must not be empty".to_owned())
        );
    }
}
