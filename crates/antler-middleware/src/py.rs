//! Python semantics DeerFlow's checks rely on, shared by the middlewares that port them.

use serde_json::Value;

/// Python truthiness of a JSON value (what DeerFlow's `if kwargs.get(...)` tests).
pub(crate) fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}
