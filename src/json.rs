//! JSON read strictly: an object that names a key twice is refused.
//!
//! serde_json keeps the last of two equal keys in a map (labels, requests,
//! capacities, `serde_json::Value`), and other readers of the same bytes
//! may keep the first: a document that means one thing to a check and
//! another to the planner. Derived structs already refuse a repeated
//! field; this refuses a repeated key anywhere, before the document is
//! decoded, with the key and its line and column.

use std::collections::BTreeSet;
use std::fmt;

use serde::de::{self, DeserializeOwned, DeserializeSeed, Deserializer, MapAccess, SeqAccess};

/// Decodes `bytes` as `T` after [`check_unique_keys`].
pub fn from_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, serde_json::Error> {
    check_unique_keys(bytes)?;
    serde_json::from_slice(bytes)
}

/// Decodes `text` as `T` after [`check_unique_keys`].
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, serde_json::Error> {
    from_slice(text.as_bytes())
}

/// Whether `bytes` is JSON in which no object names a key twice; the
/// error names the key and where its second use ends. Bounded as
/// serde_json is (nesting past 128 refused); holds one object's keys at
/// a time per level.
pub fn check_unique_keys(bytes: &[u8]) -> Result<(), serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    Walk.deserialize(&mut de)?;
    de.end()
}

/// A JSON value walked for its keys and dropped.
#[derive(Clone, Copy)]
struct Walk;

impl<'de> DeserializeSeed<'de> for Walk {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> de::Visitor<'de> for Walk {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(Walk)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut keys = BTreeSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if keys.contains(&key) {
                return Err(twice(&key));
            }
            map.next_value_seed(Walk)?;
            keys.insert(key);
        }
        Ok(())
    }
}

/// A JSON value (from JSON, or from YAML through its deserializer) in
/// which no object names a key twice: `serde_json::Value` keeps the last.
#[derive(Debug, Clone, PartialEq)]
pub struct UniqueValue(pub serde_json::Value);

impl<'de> de::Deserialize<'de> for UniqueValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let budget = std::cell::Cell::new(usize::MAX);
        Build(&budget).deserialize(d).map(UniqueValue)
    }
}

/// `bytes` as a `serde_json::Value` in which no object names a key twice,
/// of at most `max_values` values (objects, arrays, numbers, strings…
/// each count one): a value in memory takes ten to a hundred times its
/// text (`[{},{},…]`), so bounding the bytes alone does not bound it.
pub fn value_within(
    bytes: &[u8],
    max_values: usize,
) -> Result<serde_json::Value, serde_json::Error> {
    let budget = std::cell::Cell::new(max_values);
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let v = Build(&budget).deserialize(&mut de)?;
    de.end()?;
    Ok(v)
}

/// Builds a `serde_json::Value`, refusing a repeated key and any value
/// past the budget.
#[derive(Clone, Copy)]
struct Build<'b>(&'b std::cell::Cell<usize>);

impl<'de> DeserializeSeed<'de> for Build<'_> {
    type Value = serde_json::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<serde_json::Value, D::Error> {
        match self.0.get().checked_sub(1) {
            Some(left) => self.0.set(left),
            None => return Err(de::Error::custom("more values than this reader takes")),
        }
        d.deserialize_any(self)
    }
}

impl<'de> de::Visitor<'de> for Build<'_> {
    type Value = serde_json::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(v.into())
    }
    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(v.into())
    }
    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(v.into())
    }
    fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
        // As serde_json::Value: a non-finite number is null.
        Ok(serde_json::Number::from_f64(v).map_or(serde_json::Value::Null, Into::into))
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(v.into())
    }
    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(v.into())
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(serde_json::Value::Null)
    }
    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(serde_json::Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(self)? {
            out.push(v);
        }
        Ok(out.into())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                return Err(twice(&key));
            }
            let v = map.next_value_seed(self)?;
            out.insert(key, v);
        }
        Ok(out.into())
    }
}

fn twice<E: de::Error>(key: &str) -> E {
    let shown: String = key.chars().take(64).collect();
    E::custom(format_args!("an object names the key {shown:?} twice"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_key_is_refused_at_any_depth_with_its_place() {
        assert!(check_unique_keys(br#"{"a":1,"b":[{"c":1,"d":2}],"e":{}}"#).is_ok());
        let err = check_unique_keys(b"{\"a\":1,\n\"a\":2}").unwrap_err();
        assert!(err.to_string().contains("twice"), "{err}");
        assert_eq!(err.line(), 2);
        let err = check_unique_keys(br#"{"x":[{"l":{"k":"v","k":"w"}}]}"#).unwrap_err();
        assert!(err.to_string().contains("twice"), "{err}");
        // Equal after JSON's escapes: the same key.
        assert!(check_unique_keys(br#"{"k":1,"\u006b":2}"#).is_err());
        // Trailing bytes and bad JSON are refused as serde_json refuses them.
        assert!(check_unique_keys(br#"{"a":1} x"#).is_err());
        assert!(check_unique_keys(b"[1,").is_err());
        let deep = "[".repeat(10_000);
        assert!(check_unique_keys(deep.as_bytes()).is_err());
    }

    #[test]
    fn maps_decoded_strictly_keep_no_second_value() {
        type Labels = std::collections::BTreeMap<String, String>;
        let text = r#"{"team":"a","team":"b"}"#;
        // serde_json alone keeps the last.
        let loose: Labels = serde_json::from_str(text).unwrap();
        assert_eq!(loose["team"], "b");
        assert!(from_str::<Labels>(text).is_err());
        assert_eq!(from_str::<Labels>(r#"{"team":"a"}"#).unwrap()["team"], "a");
        let v: UniqueValue = serde_json::from_str(r#"{"a":[1,{"b":null}],"c":2.5}"#).unwrap();
        assert_eq!(v.0, serde_json::json!({"a":[1,{"b":null}],"c":2.5}));
        assert!(serde_json::from_str::<UniqueValue>(r#"{"a":{"b":1,"b":2}}"#).is_err());
        // Values counted: the whole document is 1 + 2 + 2.
        let text = br#"[{"a":1},{"b":2}]"#;
        assert!(value_within(text, 5).is_ok());
        let e = value_within(text, 4).unwrap_err();
        assert!(e.to_string().contains("more values"), "{e}");
        assert!(value_within(br#"{"a":1,"a":2}"#, 10).is_err());
    }

    #[test]
    fn a_demand_file_naming_a_label_twice_is_refused_where_it_is() {
        let text = r#"{"workloads": [{"key": "ml/a", "labels": {"team": "a",
            "team": "b"}, "pods": []}]}"#;
        let e = crate::demand::Demand::from_json(text, "d.json").unwrap_err();
        assert_eq!((e.file.as_str(), e.line), ("d.json", 2));
        assert!(e.message.contains("\"team\" twice"), "{e}");
    }
}
