//! The keys of the configuration file, read from its serde structs rather
//! than written down, so that the reload tests and the table of keys
//! (`config::keys`) see a key the day it is added.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, IntoDeserializer, MapAccess, Visitor};

use crate::config::FileConfig;

/// The dotted keys of the file, read from its serde structs rather than
/// written down.
pub(in crate::config) fn file_keys() -> BTreeSet<String> {
    file_key_types().into_keys().collect()
}

/// The same, each with its TOML type (`integer`, `string`, `boolean`,
/// `array`, `table`): a deserializer that offers every struct all of its
/// fields and gives each leaf an empty value, recording its path and what
/// was asked of it. A map (`policies`) is a key, and so are the fields of
/// one entry of it, under `NAME`; a list (`rlqs.buckets`) is a key, and so
/// are the fields of one element of it, under `[]`.
pub(in crate::config) fn file_key_types() -> BTreeMap<String, &'static str> {
    let found = RefCell::new(Vec::new());
    FileConfig::deserialize(Keys {
        path: String::new(),
        found: &found,
        within: false,
    })
    .unwrap_or_else(|error| panic!("{error}"));
    found.into_inner().into_iter().collect()
}

struct Keys<'a> {
    path: String,
    found: &'a RefCell<Vec<(String, &'static str)>>,
    /// An entry of a map or an element of a list: not a key of its own,
    /// unless it is a struct, whose fields are.
    within: bool,
}

impl<'a> Keys<'a> {
    fn leaf(&self, kind: &'static str) {
        if !self.within {
            self.found.borrow_mut().push((self.path.clone(), kind));
        }
    }

    fn inner(&self, suffix: &str) -> Keys<'a> {
        Keys {
            path: format!("{}{suffix}", self.path),
            found: self.found,
            within: true,
        }
    }
}

#[derive(Debug)]
struct Stop(String);

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Stop {}

impl de::Error for Stop {
    fn custom<T: std::fmt::Display>(message: T) -> Stop {
        Stop(message.to_string())
    }
}

macro_rules! zero_integers {
    ($($method:ident),*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
            self.leaf("integer");
            visitor.visit_u64(0)
        }
    )*};
}

impl<'de> de::Deserializer<'de> for Keys<'_> {
    type Error = Stop;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
        Err(Stop(format!(
            "{}: a type this test cannot enumerate: teach Keys about it",
            self.path
        )))
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
        // What is optional is the value's type: asked of the value.
        visitor.visit_some(self)
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
        self.leaf("boolean");
        visitor.visit_bool(false)
    }

    zero_integers!(
        deserialize_u8,
        deserialize_u16,
        deserialize_u32,
        deserialize_u64,
        deserialize_i8,
        deserialize_i16,
        deserialize_i32,
        deserialize_i64
    );

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
        self.leaf("string");
        visitor.visit_str("")
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
        self.deserialize_str(visitor)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
        self.leaf("array");
        visitor.visit_seq(One(Some(self.inner("[]"))))
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
        self.leaf("table");
        visitor.visit_map(OneEntry(Some(self.inner(".NAME"))))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Stop> {
        visitor.visit_map(Fields {
            path: self.path,
            fields: fields.iter(),
            current: "",
            found: self.found,
        })
    }

    serde::forward_to_deserialize_any! {
        i128 u128 f32 f64 char bytes byte_buf unit unit_struct
        newtype_struct tuple tuple_struct enum identifier ignored_any
    }
}

/// Every field of one struct, in turn, each value read by [`Keys`].
struct Fields<'a> {
    path: String,
    fields: std::slice::Iter<'static, &'static str>,
    current: &'static str,
    found: &'a RefCell<Vec<(String, &'static str)>>,
}

impl<'de> MapAccess<'de> for Fields<'_> {
    type Error = Stop;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Stop> {
        let Some(field) = self.fields.next() else {
            return Ok(None);
        };
        self.current = field;
        seed.deserialize(IntoDeserializer::<Stop>::into_deserializer(*field))
            .map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Stop> {
        let path = if self.path.is_empty() {
            self.current.to_owned()
        } else {
            format!("{}.{}", self.path, self.current)
        };
        seed.deserialize(Keys {
            path,
            found: self.found,
            within: false,
        })
    }
}

/// The one element of a list: its fields are keys under `[]`.
struct One<'a>(Option<Keys<'a>>);

impl<'de> de::SeqAccess<'de> for One<'_> {
    type Error = Stop;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Stop> {
        self.0.take().map(|keys| seed.deserialize(keys)).transpose()
    }
}

/// The one entry of a map, named `NAME`: its fields are keys under it.
struct OneEntry<'a>(Option<Keys<'a>>);

impl<'de> MapAccess<'de> for OneEntry<'_> {
    type Error = Stop;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Stop> {
        if self.0.is_none() {
            return Ok(None);
        }
        seed.deserialize(IntoDeserializer::<Stop>::into_deserializer("NAME"))
            .map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Stop> {
        let keys = self
            .0
            .take()
            .ok_or_else(|| Stop("a value without its key".into()))?;
        seed.deserialize(keys)
    }
}
