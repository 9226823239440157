//! The protocol's messages in Protocol Buffers' JSON mapping (proto3
//! JSON), written by hand for the two messages `/json` needs.
//!
//! Reading a request follows the mapping: field names in lowerCamelCase or
//! as the `.proto` file writes them (`hitsAddend` or `hits_addend`), enums
//! by name or number, 64-bit and 32-bit integers as numbers or decimal
//! strings, `null` for a field's default, and unknown fields refused.
//! Writing a response leaves out fields at their default value, writes
//! enums by name and durations as strings of seconds (`"42s"`).

use std::fmt;

use serde::{
    Deserialize, Deserializer,
    de::{self, Visitor},
};
use serde_json::{Map, Value as Json};

use crate::proto::{
    HeaderValue, RateLimitDescriptor, RateLimitRequest, RateLimitResponse, RateLimitUnit,
    rate_limit_descriptor::{Entry, RateLimitOverride},
    rate_limit_response::{Code, DescriptorStatus, RateLimit, rate_limit::Unit},
};

/// Why a body is not a request in proto3 JSON. Its message says where,
/// never what: the body may hold client values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the body is not a RateLimitRequest in JSON ({kind}, at line {line}, column {column})")]
pub(crate) struct NotARequest {
    kind: &'static str,
    line: usize,
    column: usize,
}

/// Reads a request.
pub(crate) fn parse_request(body: &[u8]) -> Result<RateLimitRequest, NotARequest> {
    serde_json::from_slice::<RequestJson>(body)
        .map(Into::into)
        .map_err(|error| NotARequest {
            kind: match error.classify() {
                serde_json::error::Category::Io => "unreadable",
                serde_json::error::Category::Syntax => "not JSON",
                serde_json::error::Category::Data => "not the message's fields",
                serde_json::error::Category::Eof => "cut short",
            },
            line: error.line(),
            column: error.column(),
        })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RequestJson {
    #[serde(default, deserialize_with = "nullable")]
    domain: String,
    #[serde(default, deserialize_with = "nullable")]
    descriptors: Vec<DescriptorJson>,
    #[serde(
        default,
        rename = "hitsAddend",
        alias = "hits_addend",
        deserialize_with = "uint32"
    )]
    hits_addend: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DescriptorJson {
    #[serde(default, deserialize_with = "nullable")]
    entries: Vec<EntryJson>,
    #[serde(default)]
    limit: Option<OverrideJson>,
    #[serde(
        default,
        rename = "hitsAddend",
        alias = "hits_addend",
        deserialize_with = "optional_uint64"
    )]
    hits_addend: Option<u64>,
    #[serde(
        default,
        rename = "isNegativeHits",
        alias = "is_negative_hits",
        deserialize_with = "nullable"
    )]
    is_negative_hits: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EntryJson {
    #[serde(default, deserialize_with = "nullable")]
    key: String,
    #[serde(default, deserialize_with = "nullable")]
    value: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OverrideJson {
    #[serde(
        default,
        rename = "requestsPerUnit",
        alias = "requests_per_unit",
        deserialize_with = "uint32"
    )]
    requests_per_unit: u32,
    #[serde(default, deserialize_with = "unit")]
    unit: i32,
}

impl From<RequestJson> for RateLimitRequest {
    fn from(json: RequestJson) -> Self {
        Self {
            domain: json.domain,
            descriptors: json
                .descriptors
                .into_iter()
                .map(|descriptor| RateLimitDescriptor {
                    entries: descriptor
                        .entries
                        .into_iter()
                        .map(|entry| Entry::new(entry.key, entry.value))
                        .collect(),
                    limit: descriptor.limit.map(|limit| RateLimitOverride {
                        requests_per_unit: limit.requests_per_unit,
                        unit: limit.unit,
                    }),
                    hits_addend: descriptor.hits_addend,
                    is_negative_hits: descriptor.is_negative_hits,
                })
                .collect(),
            hits_addend: json.hits_addend,
        }
    }
}

/// `null` reads as the default value.
fn nullable<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// An unsigned integer as a JSON number or a decimal string; `None` for
/// `null`.
struct Unsigned;

impl<'de> Visitor<'de> for Unsigned {
    type Value = Option<u64>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an unsigned integer, as a number or a string")
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Self::Value, E> {
        Ok(Some(value))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Self::Value, E> {
        u64::try_from(value)
            .map(Some)
            .map_err(|_| E::custom("a negative number where an unsigned one belongs"))
    }

    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "the value is checked to be a whole number in range"
    )]
    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Self::Value, E> {
        // proto3 JSON accepts integral numbers written with a fraction or an
        // exponent (`1.0`, `1e3`).
        if value.fract() == 0.0 && (0.0..=u64::MAX as f64).contains(&value) {
            Ok(Some(value as u64))
        } else {
            Err(E::custom("not a whole unsigned number"))
        }
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Self::Value, E> {
        if value.is_empty() || !value.bytes().all(|byte| byte.is_ascii_digit()) {
            return Err(E::custom("a string that is not an unsigned integer"));
        }
        value
            .parse()
            .map(Some)
            .map_err(|_| E::custom("an integer out of range"))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

fn optional_uint64<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    deserializer.deserialize_any(Unsigned)
}

fn uint32<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u32, D::Error> {
    let value = deserializer.deserialize_any(Unsigned)?.unwrap_or(0);
    u32::try_from(value).map_err(|_| de::Error::custom("an integer out of range"))
}

/// A `RateLimitUnit` by name or number; `null` for `UNKNOWN`.
fn unit<'de, D: Deserializer<'de>>(deserializer: D) -> Result<i32, D::Error> {
    struct Units;

    impl Visitor<'_> for Units {
        type Value = i32;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a unit's name or number")
        }

        fn visit_i64<E: de::Error>(self, value: i64) -> Result<i32, E> {
            i32::try_from(value).map_err(|_| E::custom("an enum number out of range"))
        }

        fn visit_u64<E: de::Error>(self, value: u64) -> Result<i32, E> {
            i32::try_from(value).map_err(|_| E::custom("an enum number out of range"))
        }

        fn visit_str<E: de::Error>(self, name: &str) -> Result<i32, E> {
            RateLimitUnit::from_str_name(name)
                .map(Into::into)
                .ok_or_else(|| E::custom("an unknown unit name"))
        }

        fn visit_unit<E: de::Error>(self) -> Result<i32, E> {
            Ok(0)
        }
    }

    deserializer.deserialize_any(Units)
}

/// Writes a response.
pub(crate) fn write_response(response: &RateLimitResponse) -> Vec<u8> {
    let mut fields = Map::new();
    if response.overall_code != 0 {
        fields.insert(
            "overallCode".into(),
            enum_json(response.overall_code, |code| {
                Code::try_from(code).ok().map(Code::as_str_name)
            }),
        );
    }
    if !response.statuses.is_empty() {
        let statuses = response.statuses.iter().map(status_json).collect();
        fields.insert("statuses".into(), Json::Array(statuses));
    }
    for (name, headers) in [
        ("responseHeadersToAdd", &response.response_headers_to_add),
        ("requestHeadersToAdd", &response.request_headers_to_add),
    ] {
        if !headers.is_empty() {
            let headers = headers.iter().map(header_json).collect();
            fields.insert(name.into(), Json::Array(headers));
        }
    }
    // `raw_body` and `HeaderValue.raw_value` are never set by this service.
    if let Some(metadata) = &response.dynamic_metadata {
        fields.insert("dynamicMetadata".into(), struct_json(metadata));
    }
    // Invariant: a map of strings, numbers and bools always serializes.
    serde_json::to_vec(&Json::Object(fields)).expect("JSON values serialize")
}

fn status_json(status: &DescriptorStatus) -> Json {
    let mut fields = Map::new();
    if status.code != 0 {
        fields.insert(
            "code".into(),
            enum_json(status.code, |code| {
                Code::try_from(code).ok().map(Code::as_str_name)
            }),
        );
    }
    if let Some(limit) = &status.current_limit {
        fields.insert("currentLimit".into(), limit_json(limit));
    }
    if status.limit_remaining != 0 {
        fields.insert("limitRemaining".into(), status.limit_remaining.into());
    }
    if let Some(reset) = &status.duration_until_reset {
        fields.insert("durationUntilReset".into(), duration_json(reset).into());
    }
    Json::Object(fields)
}

fn limit_json(limit: &RateLimit) -> Json {
    let mut fields = Map::new();
    if !limit.name.is_empty() {
        fields.insert("name".into(), limit.name.clone().into());
    }
    if limit.requests_per_unit != 0 {
        fields.insert("requestsPerUnit".into(), limit.requests_per_unit.into());
    }
    if limit.unit != 0 {
        fields.insert(
            "unit".into(),
            enum_json(limit.unit, |unit| {
                Unit::try_from(unit).ok().map(Unit::as_str_name)
            }),
        );
    }
    Json::Object(fields)
}

fn header_json(header: &HeaderValue) -> Json {
    let mut fields = Map::new();
    if !header.key.is_empty() {
        fields.insert("key".into(), header.key.clone().into());
    }
    if !header.value.is_empty() {
        fields.insert("value".into(), header.value.clone().into());
    }
    Json::Object(fields)
}

/// An enum by name, or by number when it has none.
fn enum_json(number: i32, name: impl Fn(i32) -> Option<&'static str>) -> Json {
    name(number).map_or_else(|| number.into(), Into::into)
}

/// A duration as proto3 JSON writes it: seconds, with 3, 6 or 9 digits of
/// fraction when there is one, and `s`.
fn duration_json(duration: &prost_types::Duration) -> String {
    let negative = duration.seconds < 0 || duration.nanos < 0;
    let seconds = duration.seconds.unsigned_abs();
    let nanos = duration.nanos.unsigned_abs();
    let sign = if negative { "-" } else { "" };
    if nanos == 0 {
        format!("{sign}{seconds}s")
    } else if nanos.is_multiple_of(1_000_000) {
        format!("{sign}{seconds}.{:03}s", nanos / 1_000_000)
    } else if nanos.is_multiple_of(1_000) {
        format!("{sign}{seconds}.{:06}s", nanos / 1_000)
    } else {
        format!("{sign}{seconds}.{nanos:09}s")
    }
}

fn struct_json(value: &prost_types::Struct) -> Json {
    Json::Object(
        value
            .fields
            .iter()
            .map(|(key, value)| (key.clone(), value_json(value)))
            .collect(),
    )
}

fn value_json(value: &prost_types::Value) -> Json {
    use prost_types::value::Kind;
    match &value.kind {
        None | Some(Kind::NullValue(_)) => Json::Null,
        Some(Kind::NumberValue(number)) => {
            serde_json::Number::from_f64(*number).map_or(Json::Null, Json::Number)
        }
        Some(Kind::StringValue(text)) => text.clone().into(),
        Some(Kind::BoolValue(value)) => (*value).into(),
        Some(Kind::StructValue(value)) => struct_json(value),
        Some(Kind::ListValue(list)) => Json::Array(list.values.iter().map(value_json).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<RateLimitRequest, NotARequest> {
        parse_request(text.as_bytes())
    }

    #[test]
    fn the_reference_example_reads_with_either_spelling() {
        let camel = parse(
            r#"{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}],"hitsAddend":"0","limit":{"requestsPerUnit":5,"unit":"MINUTE"}}],"hitsAddend":1}"#,
        )
        .expect("valid");
        let snake = parse(
            r#"{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}],"hits_addend":0,"limit":{"requests_per_unit":"5","unit":2}}],"hits_addend":"1"}"#,
        )
        .expect("valid");
        assert_eq!(camel, snake);
        assert_eq!(camel.hits_addend, 1);
        let descriptor = &camel.descriptors[0];
        assert_eq!(descriptor.hits_addend, Some(0));
        assert_eq!(
            descriptor.limit,
            Some(RateLimitOverride {
                requests_per_unit: 5,
                unit: RateLimitUnit::Minute.into(),
            })
        );
        assert_eq!(descriptor.entries, [Entry::new("k", "v")]);
    }

    #[test]
    fn null_and_absent_fields_are_defaults() {
        let request = parse(
            r#"{"domain":"d","descriptors":[{"entries":[{"key":"k","value":null}],"hitsAddend":null,"limit":null}],"hitsAddend":null}"#,
        )
        .expect("valid");
        assert_eq!(request.hits_addend, 0);
        assert_eq!(request.descriptors[0].hits_addend, None);
        assert_eq!(request.descriptors[0].limit, None);
        assert_eq!(request.descriptors[0].entries, [Entry::new("k", "")]);
        assert_eq!(parse("{}").expect("valid"), RateLimitRequest::default());
    }

    #[test]
    fn unknown_fields_names_and_malformed_numbers_are_refused_without_echoing_values() {
        for body in [
            r#"{"domain":"d","extra":1}"#,
            r#"{"descriptors":[{"entries":[{"key":"k","value":"v","other":"secret-value"}]}]}"#,
            r#"{"descriptors":[{"limit":{"unit":"FORTNIGHT"}}]}"#,
            r#"{"descriptors":[{"limit":{"unit":"WEEK"}}]}"#,
            r#"{"hitsAddend":-1}"#,
            r#"{"hitsAddend":4294967296}"#,
            r#"{"hitsAddend":"1.5"}"#,
            r#"{"descriptors":[{"hitsAddend":"secret-value"}]}"#,
            r#"{"domain":"d","hitsAddend":1,"hits_addend":2}"#,
            r#"{"domain":"d""#,
            "not json",
        ] {
            let error = parse(body).expect_err(body);
            assert!(!error.to_string().contains("secret-value"), "{error}");
        }
        // Integral numbers may carry an exponent.
        assert_eq!(
            parse(r#"{"hitsAddend":1e1}"#).expect("valid").hits_addend,
            10
        );
    }

    #[test]
    fn responses_leave_defaults_out_and_write_enums_and_durations_as_text() {
        let response = RateLimitResponse {
            overall_code: Code::OverLimit.into(),
            statuses: vec![
                DescriptorStatus {
                    code: Code::OverLimit.into(),
                    current_limit: Some(RateLimit {
                        name: String::new(),
                        requests_per_unit: 1,
                        unit: Unit::Minute.into(),
                    }),
                    limit_remaining: 0,
                    duration_until_reset: Some(prost_types::Duration {
                        seconds: 17,
                        nanos: 0,
                    }),
                },
                DescriptorStatus::default(),
            ],
            response_headers_to_add: vec![HeaderValue::new("RateLimit-Limit", "1")],
            ..RateLimitResponse::default()
        };
        let json: Json = serde_json::from_slice(&write_response(&response)).expect("JSON");
        assert_eq!(
            json,
            serde_json::json!({
                "overallCode": "OVER_LIMIT",
                "statuses": [
                    {"code": "OVER_LIMIT", "currentLimit": {"requestsPerUnit": 1, "unit": "MINUTE"}, "durationUntilReset": "17s"},
                    {},
                ],
                "responseHeadersToAdd": [{"key": "RateLimit-Limit", "value": "1"}],
            })
        );
    }

    #[test]
    fn durations_write_their_fraction_in_threes() {
        let duration = |seconds, nanos| duration_json(&prost_types::Duration { seconds, nanos });
        assert_eq!(duration(42, 0), "42s");
        assert_eq!(duration(1, 500_000_000), "1.500s");
        assert_eq!(duration(1, 1_000), "1.000001s");
        assert_eq!(duration(0, 1), "0.000000001s");
        assert_eq!(duration(-1, -500_000_000), "-1.500s");
    }

    #[test]
    fn unknown_enum_numbers_are_written_as_numbers() {
        let response = RateLimitResponse {
            overall_code: 9,
            ..RateLimitResponse::default()
        };
        let json: Json = serde_json::from_slice(&write_response(&response)).expect("JSON");
        assert_eq!(json, serde_json::json!({"overallCode": 9}));
    }
}
