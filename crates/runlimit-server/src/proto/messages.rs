//! The messages, field numbers as in Envoy's data-plane API.

use std::fmt;

/// `envoy.service.ratelimit.v3.RateLimitRequest`: which limits a request of
/// the proxy counts against.
#[derive(Clone, PartialEq, prost::Message)]
#[prost(skip_debug)]
pub struct RateLimitRequest {
    /// The domain of the rules to apply (field 1).
    #[prost(string, tag = "1")]
    pub domain: String,
    /// The descriptors, each matched against the domain's rules on its own
    /// (field 2).
    #[prost(message, repeated, tag = "2")]
    pub descriptors: Vec<RateLimitDescriptor>,
    /// Units each descriptor costs, unless it says otherwise; 0 means 1
    /// (field 3).
    #[prost(uint32, tag = "3")]
    pub hits_addend: u32,
}

impl fmt::Debug for RateLimitRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitRequest")
            .field("domain", &self.domain)
            .field("descriptors", &self.descriptors)
            .field("hits_addend", &self.hits_addend)
            .finish()
    }
}

/// `envoy.extensions.common.ratelimit.v3.RateLimitDescriptor`: a list of
/// entries, matched against one rule, with an optional limit of its own and
/// cost.
#[derive(Clone, PartialEq, prost::Message)]
#[prost(skip_debug)]
pub struct RateLimitDescriptor {
    /// The entries, in order (field 1).
    #[prost(message, repeated, tag = "1")]
    pub entries: Vec<rate_limit_descriptor::Entry>,
    /// A limit that replaces the configuration's for this descriptor
    /// (field 2).
    #[prost(message, optional, tag = "2")]
    pub limit: Option<rate_limit_descriptor::RateLimitOverride>,
    /// This descriptor's cost, replacing the request's `hits_addend`; `0`
    /// checks without counting (field 3, a `google.protobuf.UInt64Value`).
    #[prost(message, optional, tag = "3")]
    pub hits_addend: Option<u64>,
    /// Whether the hits are to be given back rather than counted (field 4).
    #[prost(bool, tag = "4")]
    pub is_negative_hits: bool,
}

impl RateLimitDescriptor {
    /// A descriptor of `entries`, without a limit of its own or a cost.
    #[must_use]
    pub fn new(entries: impl IntoIterator<Item = rate_limit_descriptor::Entry>) -> Self {
        Self {
            entries: entries.into_iter().collect(),
            ..Self::default()
        }
    }
}

impl fmt::Debug for RateLimitDescriptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitDescriptor")
            .field("entries", &self.entries)
            .field("limit", &self.limit)
            .field("hits_addend", &self.hits_addend)
            .field("is_negative_hits", &self.is_negative_hits)
            .finish()
    }
}

/// The types nested in [`RateLimitDescriptor`].
pub mod rate_limit_descriptor {
    use std::fmt;

    /// `RateLimitDescriptor.Entry`: one key and its value.
    ///
    /// Its [`Debug`](fmt::Debug) shows the key only: values identify
    /// clients.
    #[derive(Clone, PartialEq, Eq, Hash, prost::Message)]
    #[prost(skip_debug)]
    pub struct Entry {
        /// The key (field 1).
        #[prost(string, tag = "1")]
        pub key: String,
        /// The value (field 2).
        #[prost(string, tag = "2")]
        pub value: String,
    }

    impl Entry {
        /// An entry of `key` and `value`.
        #[must_use]
        pub fn new(key: impl Into<String>, value: impl Into<String>) -> Self {
            Self {
                key: key.into(),
                value: value.into(),
            }
        }
    }

    impl fmt::Debug for Entry {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_struct("Entry")
                .field("key", &self.key)
                .finish_non_exhaustive()
        }
    }

    /// `RateLimitDescriptor.RateLimitOverride`: a limit given in the request.
    #[derive(Clone, Copy, PartialEq, Eq, Hash, prost::Message)]
    pub struct RateLimitOverride {
        /// Requests allowed per unit (field 1).
        #[prost(uint32, tag = "1")]
        pub requests_per_unit: u32,
        /// The unit, an [`RateLimitUnit`](super::RateLimitUnit) (field 2).
        #[prost(enumeration = "super::RateLimitUnit", tag = "2")]
        pub unit: i32,
    }
}

/// `envoy.type.v3.RateLimitUnit`: the unit of a limit override. It has no
/// week.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum RateLimitUnit {
    /// Not set.
    Unknown = 0,
    /// One second.
    Second = 1,
    /// One minute.
    Minute = 2,
    /// One hour.
    Hour = 3,
    /// One day.
    Day = 4,
    /// 30 days.
    Month = 5,
    /// 365 days.
    Year = 6,
}

impl RateLimitUnit {
    /// The name Protocol Buffers' JSON mapping uses: `SECOND`, `MINUTE`, ….
    #[must_use]
    pub const fn as_str_name(self) -> &'static str {
        match self {
            Self::Unknown => "UNKNOWN",
            Self::Second => "SECOND",
            Self::Minute => "MINUTE",
            Self::Hour => "HOUR",
            Self::Day => "DAY",
            Self::Month => "MONTH",
            Self::Year => "YEAR",
        }
    }

    /// The unit named `name` as [`as_str_name`](Self::as_str_name) writes it.
    #[must_use]
    pub fn from_str_name(name: &str) -> Option<Self> {
        [
            Self::Unknown,
            Self::Second,
            Self::Minute,
            Self::Hour,
            Self::Day,
            Self::Month,
            Self::Year,
        ]
        .into_iter()
        .find(|unit| unit.as_str_name() == name)
    }
}

/// `envoy.service.ratelimit.v3.RateLimitResponse`: the decision, and a status
/// per request descriptor.
#[derive(Clone, PartialEq, prost::Message)]
#[prost(skip_debug)]
pub struct RateLimitResponse {
    /// `OVER_LIMIT` when the request is to be refused (field 1).
    #[prost(enumeration = "rate_limit_response::Code", tag = "1")]
    pub overall_code: i32,
    /// One status per request descriptor, in order (field 2).
    #[prost(message, repeated, tag = "2")]
    pub statuses: Vec<rate_limit_response::DescriptorStatus>,
    /// Headers for the proxy to add to its response (field 3).
    #[prost(message, repeated, tag = "3")]
    pub response_headers_to_add: Vec<HeaderValue>,
    /// Headers for the proxy to add to the request it forwards (field 4).
    #[prost(message, repeated, tag = "4")]
    pub request_headers_to_add: Vec<HeaderValue>,
    /// A body for the proxy's refusal (field 5).
    #[prost(bytes = "vec", tag = "5")]
    pub raw_body: Vec<u8>,
    /// Metadata for the proxy's other filters (field 6).
    #[prost(message, optional, tag = "6")]
    pub dynamic_metadata: Option<prost_types::Struct>,
}

impl fmt::Debug for RateLimitResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitResponse")
            .field("overall_code", &self.overall_code())
            .field("statuses", &self.statuses)
            .field("response_headers_to_add", &self.response_headers_to_add)
            .field("request_headers_to_add", &self.request_headers_to_add)
            .field("raw_body", &self.raw_body.len())
            .finish_non_exhaustive()
    }
}

/// The types nested in [`RateLimitResponse`].
pub mod rate_limit_response {
    /// `RateLimitResponse.Code`.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
    #[repr(i32)]
    pub enum Code {
        /// Not set. Envoy treats it as `OK`; this service never answers it.
        Unknown = 0,
        /// Within the limits.
        Ok = 1,
        /// Over a limit.
        OverLimit = 2,
    }

    impl Code {
        /// The name Protocol Buffers' JSON mapping uses: `UNKNOWN`, `OK`,
        /// `OVER_LIMIT`.
        #[must_use]
        pub const fn as_str_name(self) -> &'static str {
            match self {
                Self::Unknown => "UNKNOWN",
                Self::Ok => "OK",
                Self::OverLimit => "OVER_LIMIT",
            }
        }
    }

    /// `RateLimitResponse.RateLimit`: the limit a descriptor counts against.
    #[derive(Clone, PartialEq, Eq, Hash, prost::Message)]
    pub struct RateLimit {
        /// The rule's name, if it has one (field 3).
        #[prost(string, tag = "3")]
        pub name: String,
        /// Requests allowed per unit (field 1).
        #[prost(uint32, tag = "1")]
        pub requests_per_unit: u32,
        /// The unit (field 2).
        #[prost(enumeration = "rate_limit::Unit", tag = "2")]
        pub unit: i32,
    }

    /// The types nested in [`RateLimit`].
    pub mod rate_limit {
        /// `RateLimitResponse.RateLimit.Unit`.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
        #[repr(i32)]
        pub enum Unit {
            /// Not set.
            Unknown = 0,
            /// One second.
            Second = 1,
            /// One minute.
            Minute = 2,
            /// One hour.
            Hour = 3,
            /// One day.
            Day = 4,
            /// 30 days.
            Month = 5,
            /// 365 days.
            Year = 6,
            /// 7 days.
            Week = 7,
        }

        impl Unit {
            /// The name Protocol Buffers' JSON mapping uses: `SECOND`,
            /// `MINUTE`, ….
            #[must_use]
            pub const fn as_str_name(self) -> &'static str {
                match self {
                    Self::Unknown => "UNKNOWN",
                    Self::Second => "SECOND",
                    Self::Minute => "MINUTE",
                    Self::Hour => "HOUR",
                    Self::Day => "DAY",
                    Self::Month => "MONTH",
                    Self::Year => "YEAR",
                    Self::Week => "WEEK",
                }
            }
        }
    }

    /// `RateLimitResponse.DescriptorStatus`: the outcome for one request
    /// descriptor.
    #[derive(Clone, PartialEq, Eq, Hash, prost::Message)]
    pub struct DescriptorStatus {
        /// Whether this descriptor is within its limit (field 1).
        #[prost(enumeration = "Code", tag = "1")]
        pub code: i32,
        /// The limit it counts against; absent when none applies (field 2).
        #[prost(message, optional, tag = "2")]
        pub current_limit: Option<RateLimit>,
        /// Units left (field 3).
        #[prost(uint32, tag = "3")]
        pub limit_remaining: u32,
        /// Time until the limit is available again (field 4).
        #[prost(message, optional, tag = "4")]
        pub duration_until_reset: Option<prost_types::Duration>,
    }
}

/// `envoy.config.core.v3.HeaderValue`: a header to add.
#[derive(Clone, PartialEq, Eq, Hash, prost::Message)]
pub struct HeaderValue {
    /// The name (field 1).
    #[prost(string, tag = "1")]
    pub key: String,
    /// The value as text (field 2).
    #[prost(string, tag = "2")]
    pub value: String,
    /// The value as bytes, when it is not text; this service never sets it
    /// (field 3).
    #[prost(bytes = "vec", tag = "3")]
    pub raw_value: Vec<u8>,
}

impl HeaderValue {
    /// A header of `key` and the text `value`.
    #[must_use]
    pub fn new(key: impl Into<String>, value: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            value: value.into(),
            raw_value: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use prost::Message;

    use super::{
        rate_limit_descriptor::{Entry, RateLimitOverride},
        rate_limit_response::{Code, DescriptorStatus, RateLimit, rate_limit::Unit},
        *,
    };

    fn hex(bytes: &[u8]) -> String {
        bytes
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Encodes `message`, compares the bytes with `expected` (hex), and
    /// decodes them back to `message`.
    fn round_trip<M: Message + Default + PartialEq + fmt::Debug>(message: &M, expected: &str) {
        let bytes = message.encode_to_vec();
        assert_eq!(hex(&bytes), expected);
        assert_eq!(&M::decode(bytes.as_slice()).expect("decodes"), message);
    }

    #[test]
    fn a_request_with_a_zero_hits_addend_has_envoys_bytes() {
        let request = RateLimitRequest {
            domain: "d".into(),
            descriptors: vec![RateLimitDescriptor {
                hits_addend: Some(0),
                ..RateLimitDescriptor::new([Entry::new("k", "v")])
            }],
            hits_addend: 0,
        };
        // An empty UInt64Value (`1a 00`) is "set to 0", not "unset".
        round_trip(&request, "0a 01 64 12 0a 0a 06 0a 01 6b 12 01 76 1a 00");
        let unset = RateLimitRequest {
            descriptors: vec![RateLimitDescriptor::new([Entry::new("k", "v")])],
            ..request
        };
        round_trip(&unset, "0a 01 64 12 08 0a 06 0a 01 6b 12 01 76");
    }

    #[test]
    fn an_over_limit_response_has_envoys_bytes() {
        let response = RateLimitResponse {
            overall_code: Code::OverLimit.into(),
            statuses: vec![DescriptorStatus {
                code: Code::OverLimit.into(),
                current_limit: Some(RateLimit {
                    name: "n".into(),
                    requests_per_unit: 10,
                    unit: Unit::Minute.into(),
                }),
                limit_remaining: 0,
                duration_until_reset: Some(prost_types::Duration {
                    seconds: 42,
                    nanos: 0,
                }),
            }],
            response_headers_to_add: vec![HeaderValue::new("a", "b")],
            ..RateLimitResponse::default()
        };
        round_trip(
            &response,
            "08 02 12 0f 08 02 12 07 08 0a 10 02 1a 01 6e 22 02 08 2a 1a 06 0a 01 61 12 01 62",
        );
    }

    #[test]
    fn an_entry_is_key_then_value() {
        round_trip(&Entry::new("k", "v"), "0a 01 6b 12 01 76");
    }

    #[test]
    fn an_override_is_requests_per_unit_then_unit() {
        let limit = RateLimitOverride {
            requests_per_unit: 5,
            unit: RateLimitUnit::Minute.into(),
        };
        round_trip(&limit, "08 05 10 02");
    }

    #[test]
    fn a_descriptor_with_every_field_set() {
        let descriptor = RateLimitDescriptor {
            entries: vec![Entry::new("k", "v")],
            limit: Some(RateLimitOverride {
                requests_per_unit: 5,
                unit: RateLimitUnit::Minute.into(),
            }),
            hits_addend: Some(3),
            is_negative_hits: true,
        };
        round_trip(
            &descriptor,
            "0a 06 0a 01 6b 12 01 76 12 04 08 05 10 02 1a 02 08 03 20 01",
        );
    }

    #[test]
    fn a_request_with_a_request_level_hits_addend() {
        let request = RateLimitRequest {
            domain: "d".into(),
            descriptors: vec![RateLimitDescriptor::new([Entry::new("k", "")])],
            hits_addend: 7,
        };
        // An empty value is not written at all.
        round_trip(&request, "0a 01 64 12 05 0a 03 0a 01 6b 18 07");
    }

    #[test]
    fn a_rate_limit_writes_its_name_as_field_three() {
        let limit = RateLimit {
            name: "n".into(),
            requests_per_unit: 10,
            unit: Unit::Week.into(),
        };
        round_trip(&limit, "08 0a 10 07 1a 01 6e");
    }

    #[test]
    fn a_descriptor_status_with_a_remaining_count_and_a_fractional_reset() {
        let status = DescriptorStatus {
            code: Code::Ok.into(),
            current_limit: None,
            limit_remaining: u32::MAX,
            duration_until_reset: Some(prost_types::Duration {
                seconds: 1,
                nanos: 5,
            }),
        };
        round_trip(&status, "08 01 18 ff ff ff ff 0f 22 04 08 01 10 05");
    }

    #[test]
    fn a_header_value_with_raw_bytes() {
        let header = HeaderValue {
            raw_value: vec![0xff],
            ..HeaderValue::new("a", "b")
        };
        round_trip(&header, "0a 01 61 12 01 62 1a 01 ff");
    }

    #[test]
    fn a_response_with_request_headers_a_body_and_metadata() {
        let metadata = prost_types::Struct {
            fields: BTreeMap::from([(
                "x".to_owned(),
                prost_types::Value {
                    kind: Some(prost_types::value::Kind::BoolValue(true)),
                },
            )]),
        };
        let response = RateLimitResponse {
            overall_code: Code::Ok.into(),
            request_headers_to_add: vec![HeaderValue::new("a", "b")],
            raw_body: b"hi".to_vec(),
            dynamic_metadata: Some(metadata),
            ..RateLimitResponse::default()
        };
        round_trip(
            &response,
            "08 01 22 06 0a 01 61 12 01 62 2a 02 68 69 32 09 0a 07 0a 01 78 12 02 20 01",
        );
    }

    #[test]
    fn fields_this_service_leaves_out_and_unknown_enum_numbers_still_decode() {
        // A status with `quota` (field 5) and a response with `quota` (field
        // 7), both `not-implemented-hide`, and a code from a later version.
        let bytes = [
            0x08, 0x09, // overall_code 9
            0x12, 0x06, 0x08, 0x01, 0x2a, 0x02, 0x08, 0x01, // status: OK, quota{requests: 1}
            0x3a, 0x02, 0x08, 0x01, // quota{requests: 1}
        ];
        let response = RateLimitResponse::decode(&bytes[..]).expect("decodes");
        assert_eq!(response.overall_code, 9);
        assert_eq!(response.overall_code(), Code::Unknown);
        assert_eq!(response.statuses.len(), 1);
        assert_eq!(response.statuses[0].code(), Code::Ok);
    }

    #[test]
    fn debug_output_shows_keys_but_no_values() {
        let request = RateLimitRequest {
            domain: "edge".into(),
            descriptors: vec![RateLimitDescriptor::new([Entry::new(
                "remote_address",
                "203.0.113.7",
            )])],
            hits_addend: 1,
        };
        let text = format!("{request:?}");
        assert!(text.contains("remote_address"), "{text}");
        assert!(!text.contains("203.0.113.7"), "{text}");
    }

    #[test]
    fn unit_names_are_the_json_mappings() {
        assert_eq!(
            RateLimitUnit::from_str_name("MINUTE"),
            Some(RateLimitUnit::Minute)
        );
        assert_eq!(RateLimitUnit::from_str_name("minute"), None);
        assert_eq!(RateLimitUnit::from_str_name("WEEK"), None);
        assert_eq!(Unit::Week.as_str_name(), "WEEK");
        assert_eq!(Code::OverLimit.as_str_name(), "OVER_LIMIT");
    }
}
