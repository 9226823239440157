//! JSON lines: one object per line, fields by name or dotted path.

use std::borrow::Cow;

use serde_json::{Map, Value};

use super::Fields;

pub(super) struct Object(Map<String, Value>);

impl Object {
    pub(super) fn parse(text: &[u8]) -> Option<Self> {
        match serde_json::from_slice(text).ok()? {
            Value::Object(map) => Some(Self(map)),
            _ => None,
        }
    }

    fn find(&self, name: &str) -> Option<&Value> {
        if let Some(value) = self.0.get(name) {
            return Some(value);
        }
        // `http.request.method` into nested objects, as structured loggers nest.
        let mut parts = name.split('.');
        let mut value = self.0.get(parts.next()?)?;
        for part in parts {
            value = value.as_object()?.get(part)?;
        }
        Some(value)
    }
}

impl Fields for Object {
    type Handle = String;

    fn get(&self, name: &String) -> Option<Cow<'_, [u8]>> {
        match self.find(name)? {
            Value::String(text) => Some(Cow::Borrowed(text.as_bytes())),
            Value::Number(number) => Some(Cow::Owned(number.to_string().into_bytes())),
            Value::Bool(flag) => Some(Cow::Borrowed(if *flag { b"true" } else { b"false" })),
            Value::Null | Value::Array(_) | Value::Object(_) => None,
        }
    }
}
