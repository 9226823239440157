//! Who a request counts against: a client network, a field, or both.

use std::{
    fmt,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    str::FromStr,
};

/// One part of a subject.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SubjectPart {
    /// The client address, grouped into its network: the host field of a
    /// Common Log Format line, or the named field of other formats.
    Address {
        /// The field holding the address; `None` for the format's own
        /// (`host` in CLF, `ip` elsewhere).
        field: Option<String>,
    },
    /// A field's value as written, such as a user, an API token or a path.
    Field(String),
}

/// The subject of a request: one or more parts, all of which must be present.
///
/// Parsed from `ip`, `ip:FIELD`, a field name (or `field:NAME`), or several of
/// these joined by `+`, such as `ip+path`. Addresses are grouped into
/// networks: IPv4 /32 and IPv6 /64 unless set otherwise, so one IPv6 host
/// cannot dodge a limit by rotating through its own /64.
///
/// ```
/// use runlimit_sim::SubjectSpec;
///
/// let spec: SubjectSpec = "ip+path".parse()?;
/// assert_eq!(spec.parts().len(), 2);
/// let spec = spec.with_prefixes(24, 48)?;
/// assert_eq!(spec.prefixes(), (24, 48));
/// # Ok::<(), runlimit_sim::SubjectSpecError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubjectSpec {
    parts: Vec<SubjectPart>,
    ipv4_prefix: u8,
    ipv6_prefix: u8,
}

/// Why a subject specification was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SubjectSpecError {
    /// A part between `+` signs was empty.
    #[error("a subject part is empty (expected e.g. `ip`, `user` or `ip+path`)")]
    EmptyPart,
    /// A network prefix was longer than the address.
    #[error("an IPv{version} prefix must be at most {max} bits, not {prefix}")]
    PrefixTooLong {
        /// 4 or 6.
        version: u8,
        /// The refused prefix length.
        prefix: u8,
        /// 32 or 128.
        max: u8,
    },
}

impl SubjectSpec {
    /// The client address alone, IPv4 /32 and IPv6 /64.
    #[must_use]
    pub fn client_address() -> Self {
        Self {
            parts: vec![SubjectPart::Address { field: None }],
            ipv4_prefix: 32,
            ipv6_prefix: 64,
        }
    }

    /// Sets the network prefixes addresses are grouped by.
    ///
    /// # Errors
    ///
    /// [`SubjectSpecError::PrefixTooLong`] for an IPv4 prefix above 32 or an
    /// IPv6 prefix above 128.
    pub fn with_prefixes(mut self, ipv4: u8, ipv6: u8) -> Result<Self, SubjectSpecError> {
        if ipv4 > 32 {
            return Err(SubjectSpecError::PrefixTooLong {
                version: 4,
                prefix: ipv4,
                max: 32,
            });
        }
        if ipv6 > 128 {
            return Err(SubjectSpecError::PrefixTooLong {
                version: 6,
                prefix: ipv6,
                max: 128,
            });
        }
        self.ipv4_prefix = ipv4;
        self.ipv6_prefix = ipv6;
        Ok(self)
    }

    /// The parts, in order.
    #[must_use]
    pub fn parts(&self) -> &[SubjectPart] {
        &self.parts
    }

    /// The IPv4 and IPv6 prefix lengths.
    #[must_use]
    pub fn prefixes(&self) -> (u8, u8) {
        (self.ipv4_prefix, self.ipv6_prefix)
    }

    /// Appends the encoding of an address part to `out`.
    pub(crate) fn push_address(&self, text: &[u8], out: &mut Vec<u8>) -> Option<()> {
        let text = std::str::from_utf8(text).ok()?;
        // Some logs write a port or brackets; an address is what we group.
        let address = parse_address(text)?;
        match address {
            IpAddr::V4(v4) => {
                let bits = u32::from(v4) & mask32(self.ipv4_prefix);
                out.push(TAG_V4);
                out.push(self.ipv4_prefix);
                out.extend_from_slice(&bits.to_be_bytes());
            }
            IpAddr::V6(v6) => {
                // An IPv4-mapped address is the IPv4 client it maps.
                if let Some(v4) = v6.to_ipv4_mapped() {
                    let bits = u32::from(v4) & mask32(self.ipv4_prefix);
                    out.push(TAG_V4);
                    out.push(self.ipv4_prefix);
                    out.extend_from_slice(&bits.to_be_bytes());
                } else {
                    let bits = u128::from(v6) & mask128(self.ipv6_prefix);
                    out.push(TAG_V6);
                    out.push(self.ipv6_prefix);
                    out.extend_from_slice(&bits.to_be_bytes());
                }
            }
        }
        Some(())
    }
}

/// Appends the encoding of a field part to `out`.
pub(crate) fn push_field(value: &[u8], out: &mut Vec<u8>) {
    out.push(TAG_FIELD);
    // Length-prefixed, so that no two different part lists encode alike.
    let len = u32::try_from(value.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(value);
}

const TAG_V4: u8 = b'4';
const TAG_V6: u8 = b'6';
const TAG_FIELD: u8 = b'f';

fn mask32(prefix: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0)
}

fn mask128(prefix: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0)
}

fn parse_address(text: &str) -> Option<IpAddr> {
    if let Ok(address) = text.parse() {
        return Some(address);
    }
    // `[2001:db8::1]:443` or `192.0.2.1:443`.
    if let Some(rest) = text.strip_prefix('[') {
        return rest.split_once(']')?.0.parse().ok();
    }
    let (host, port) = text.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    host.parse::<Ipv4Addr>().ok().map(IpAddr::V4)
}

/// Renders an encoded subject for an operator who asked for raw subjects:
/// `198.51.100.0/24`, `2001:db8:1:2::/64`, field values as (lossy) text,
/// parts joined by ` + `.
pub(crate) fn render(mut encoded: &[u8]) -> String {
    const MAX_FIELD_CHARS: usize = 200;
    let mut parts = Vec::new();
    while let Some((&tag, rest)) = encoded.split_first() {
        match tag {
            TAG_V4 if rest.len() >= 5 => {
                let prefix = rest[0];
                let address = Ipv4Addr::from([rest[1], rest[2], rest[3], rest[4]]);
                parts.push(if prefix == 32 {
                    address.to_string()
                } else {
                    format!("{address}/{prefix}")
                });
                encoded = &rest[5..];
            }
            TAG_V6 if rest.len() >= 17 => {
                let prefix = rest[0];
                let mut octets = [0u8; 16];
                octets.copy_from_slice(&rest[1..17]);
                let address = Ipv6Addr::from(octets);
                parts.push(if prefix == 128 {
                    address.to_string()
                } else {
                    format!("{address}/{prefix}")
                });
                encoded = &rest[17..];
            }
            TAG_FIELD if rest.len() >= 4 => {
                let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
                let value = rest.get(4..4 + len).unwrap_or(&rest[4..]);
                // Control characters escaped: raw subjects go to terminals.
                let text: String = String::from_utf8_lossy(value)
                    .chars()
                    .take(MAX_FIELD_CHARS)
                    .flat_map(|c| {
                        let escaped = c.is_control().then(|| c.escape_default());
                        escaped
                            .into_iter()
                            .flatten()
                            .chain((!c.is_control()).then_some(c))
                    })
                    .collect();
                parts.push(text);
                encoded = rest.get(4 + len..).unwrap_or(&[]);
            }
            _ => break,
        }
    }
    parts.join(" + ")
}

impl FromStr for SubjectSpec {
    type Err = SubjectSpecError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let parts = text
            .split('+')
            .map(|part| {
                let part = part.trim();
                match part {
                    "" => Err(SubjectSpecError::EmptyPart),
                    "ip" => Ok(SubjectPart::Address { field: None }),
                    _ => Ok(if let Some(field) = part.strip_prefix("ip:") {
                        SubjectPart::Address {
                            field: Some(field.to_owned()),
                        }
                    } else {
                        let name = part.strip_prefix("field:").unwrap_or(part);
                        SubjectPart::Field(name.to_owned())
                    }),
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        if parts.iter().any(|part| match part {
            SubjectPart::Address { field: Some(name) } | SubjectPart::Field(name) => {
                name.is_empty()
            }
            SubjectPart::Address { field: None } => false,
        }) {
            return Err(SubjectSpecError::EmptyPart);
        }
        Ok(Self {
            parts,
            ..Self::client_address()
        })
    }
}

impl fmt::Display for SubjectSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, part) in self.parts.iter().enumerate() {
            if index > 0 {
                f.write_str("+")?;
            }
            match part {
                SubjectPart::Address { field: None } => f.write_str("ip")?,
                SubjectPart::Address { field: Some(name) } => write!(f, "ip:{name}")?,
                SubjectPart::Field(name) => f.write_str(name)?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(spec: &SubjectSpec, address: &str) -> Option<String> {
        let mut out = Vec::new();
        spec.push_address(address.as_bytes(), &mut out)?;
        Some(render(&out))
    }

    #[test]
    fn addresses_group_into_their_networks() {
        let spec = SubjectSpec::client_address();
        assert_eq!(
            encode(&spec, "198.51.100.7").as_deref(),
            Some("198.51.100.7")
        );
        assert_eq!(
            encode(&spec, "2001:db8:1:2:3:4:5:6").as_deref(),
            Some("2001:db8:1:2::/64")
        );
        assert_eq!(
            encode(&spec, "::ffff:192.0.2.9").as_deref(),
            Some("192.0.2.9")
        );
        assert_eq!(
            encode(&spec, "[2001:db8::1]:443").as_deref(),
            Some("2001:db8::/64")
        );
        assert_eq!(
            encode(&spec, "192.0.2.1:8080").as_deref(),
            Some("192.0.2.1")
        );
        let wide = spec.with_prefixes(24, 48).expect("valid prefixes");
        assert_eq!(
            encode(&wide, "198.51.100.7").as_deref(),
            Some("198.51.100.0/24")
        );
        assert_eq!(encode(&wide, "not-an-address"), None);
    }

    #[test]
    fn specs_parse_and_print_back() {
        for text in ["ip", "user", "ip+path", "ip:client_ip+token"] {
            let spec: SubjectSpec = text.parse().expect("valid spec");
            assert_eq!(spec.to_string(), text);
        }
        assert_eq!(
            "ip+".parse::<SubjectSpec>(),
            Err(SubjectSpecError::EmptyPart)
        );
        assert_eq!(
            "ip:".parse::<SubjectSpec>(),
            Err(SubjectSpecError::EmptyPart)
        );
        assert!(SubjectSpec::client_address().with_prefixes(33, 64).is_err());
        assert!(SubjectSpec::client_address().with_prefixes(0, 129).is_err());
    }

    #[test]
    fn fields_are_length_prefixed_so_parts_cannot_run_together() {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        push_field(b"ab", &mut a);
        push_field(b"c", &mut a);
        push_field(b"a", &mut b);
        push_field(b"bc", &mut b);
        assert_ne!(a, b);
        assert_eq!(render(&a), "ab + c");
    }
}
