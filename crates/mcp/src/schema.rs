//! The tools' JSON Schemas, derived from their Rust types (schemars, draft 2020-12) and made
//! portable: clients validate them with strict validators (the TypeScript SDK's ajv) and some
//! read them literally (the Inspector CLI typed `["boolean","null"]` as a string).
//!
//! - No `format` that JSON Schema does not define: schemars writes `uint64`, `uint16`, `int32`
//!   and the like for Rust integers; validators warn about them (the TypeScript SDK printed 64
//!   lines per `tools/list`). The bounds stay as `minimum`/`maximum`.
//! - No `null` in a `type` union and no `{type: null}` branch in an `anyOf`: an optional field
//!   is simply not `required` (results never write `null`: their optional fields are skipped).
//!   The one `null` an argument accepts, `cleanup: null` in `process_update`, is a documented
//!   `oneOf`, left as it is.
//!
//! The schemas are checked in under `schema/mcp/` (`tests/mcp.rs` fails when they drift;
//! `SHEEPDOG_BLESS=1` rewrites them).

use std::sync::Arc;

use rmcp::handler::server::common::{schema_for_empty_input, schema_for_input, schema_for_output};
use rmcp::model::JsonObject;
use schemars::JsonSchema;
use serde_json::Value;

/// The `format`s JSON Schema 2020-12 defines (none of them is used here today).
const STANDARD_FORMATS: &[&str] = &[
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

/// Makes `v` (a schema, or any part of one) portable, as the module says.
pub fn portable(v: &mut Value) {
    match v {
        Value::Object(m) => {
            if m.get("format").and_then(Value::as_str).is_some_and(|f| !STANDARD_FORMATS.contains(&f)) {
                m.remove("format");
            }
            if let Some(Value::Array(types)) = m.get("type") {
                let mut kept: Vec<Value> = types.iter().filter(|t| t.as_str() != Some("null")).cloned().collect();
                let t = if kept.len() == 1 { kept.remove(0) } else { Value::Array(kept) };
                m.insert("type".into(), t);
            }
            if let Some(Value::Array(branches)) = m.get("anyOf") {
                let kept: Vec<Value> = branches
                    .iter()
                    .filter(|b| b.get("type").and_then(Value::as_str) != Some("null"))
                    .cloned()
                    .collect();
                if kept.len() == 1 {
                    m.remove("anyOf");
                    if let Value::Object(only) = &kept[0] {
                        for (k, x) in only {
                            m.entry(k.clone()).or_insert_with(|| x.clone());
                        }
                    }
                } else {
                    m.insert("anyOf".into(), Value::Array(kept));
                }
            }
            if m.get("default") == Some(&Value::Null) {
                m.remove("default");
            }
            for x in m.values_mut() {
                portable(x);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(portable),
        _ => {}
    }
}

fn made_portable(schema: &JsonObject) -> Arc<JsonObject> {
    let mut v = Value::Object(schema.clone());
    portable(&mut v);
    match v {
        Value::Object(m) => Arc::new(m),
        _ => Arc::new(schema.clone()),
    }
}

/// The `inputSchema` of a tool whose arguments are `T`.
pub fn input<T: JsonSchema + 'static>() -> Arc<JsonObject> {
    made_portable(&schema_for_input::<T>().unwrap_or_else(|_| schema_for_empty_input()))
}

/// The `outputSchema` of a tool whose `structuredContent` is `T`.
pub fn output<T: JsonSchema + 'static>() -> Arc<JsonObject> {
    made_portable(&schema_for_output::<T>())
}

#[cfg(test)]
mod tests {
    use super::portable;
    use serde_json::json;

    #[test]
    fn formats_and_nulls_are_taken_out_and_the_documented_one_of_stays() {
        let mut v = json!({
            "type": "object",
            "properties": {
                "a": {"type": ["integer", "null"], "format": "uint64", "minimum": 0, "default": null},
                "b": {"anyOf": [{"$ref": "#/$defs/B"}, {"type": "null"}], "description": "b"},
                "c": {"oneOf": [{"$ref": "#/$defs/B"}, {"type": "null"}]},
                "d": {"type": "string", "format": "date-time"}
            }
        });
        portable(&mut v);
        assert_eq!(
            v,
            json!({
                "type": "object",
                "properties": {
                    "a": {"type": "integer", "minimum": 0},
                    "b": {"$ref": "#/$defs/B", "description": "b"},
                    "c": {"oneOf": [{"$ref": "#/$defs/B"}, {"type": "null"}]},
                    "d": {"type": "string", "format": "date-time"}
                }
            })
        );
    }
}
