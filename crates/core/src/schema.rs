//! The JSON Schemas (draft 2020-12) of every document sheepdog prints, generated from the Rust
//! types that serialize them, so a host can type its parsing from `schema/` instead of mirroring
//! ~40 fields by hand.
//!
//! [`documents`] is the one list: a file name under `schema/` and the schema of the type behind
//! it. Adding a document is one line there. `tests/schema.rs` compares the list with the
//! checked-in files and fails on any difference (a changed view is a visible schema diff);
//! `SHEEPDOG_BLESS=1 cargo test --test schema` writes them anew.
//!
//! The generator is [`generator`]: 2020-12, for serialization (a field skipped when empty is
//! not required), and without schemars' non-standard integer `format`s (`uint64`, `int32`...),
//! which some clients reject: an unsigned integer says `minimum: 0` instead.
//!
//! The supervisor never calls any of this: nothing on its path names a schema, so the derived
//! `JsonSchema` code is not linked into what it runs (BENCHMARKS.md, "Schemas").

use schemars::generate::{SchemaGenerator, SchemaSettings};
use schemars::{JsonSchema, Schema};

/// Integer formats schemars emits that are not JSON Schema's own.
const NON_STANDARD_FORMATS: [&str; 12] =
    ["int", "uint", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "int128", "uint128"];

/// Drops a non-standard integer `format`, keeping (or adding, for unsigned ones) `minimum: 0`.
fn standard_formats(schema: &mut Schema) {
    let Some(obj) = schema.as_object_mut() else { return };
    let unsigned = match obj.get("format").and_then(|f| f.as_str()) {
        Some(f) if NON_STANDARD_FORMATS.contains(&f) => f.starts_with('u'),
        _ => return,
    };
    obj.remove("format");
    if unsigned && !obj.contains_key("minimum") {
        obj.insert("minimum".into(), 0.into());
    }
}

/// The generator every schema of sheepdog's comes from (see the module docs).
pub fn generator() -> SchemaGenerator {
    SchemaSettings::draft2020_12()
        .for_serialize()
        .with_transform(schemars::transform::RecursiveTransform(standard_formats))
        .into_generator()
}

/// The root schema of `T`, with its definitions.
pub fn schema_for<T: JsonSchema>() -> Schema {
    generator().into_root_schema_for::<T>()
}

/// Every document and its schema: `(file name under schema/, schema)`. One line per document.
pub fn documents() -> Vec<(&'static str, Schema)> {
    use crate::view;
    vec![
        ("entry.json", schema_for::<view::EntryView>()),
        ("error.json", schema_for::<view::ErrorDoc>()),
        ("start.json", schema_for::<view::StartDoc>()),
        ("restart.json", schema_for::<view::RestartDoc>()),
        ("ps.json", schema_for::<view::PsDoc<'static>>()),
        ("update.json", schema_for::<view::EntryDoc>()),
        ("stop.json", schema_for::<view::StopDoc>()),
        ("wait.json", schema_for::<view::WaitDoc>()),
        ("clear.json", schema_for::<view::ClearDoc>()),
        ("reap.json", schema_for::<view::ReapDoc>()),
        ("logs.json", schema_for::<view::LogsDoc>()),
        ("send.json", schema_for::<view::SendDoc>()),
        ("doctor.json", schema_for::<view::DoctorDoc>()),
        ("events-fd.json", schema_for::<crate::events::EventLine>()),
        ("events.json", schema_for::<crate::journal::Record>()),
    ]
}

/// A schema as the checked-in file holds it: pretty JSON and a final newline.
pub fn to_file_text(schema: &Schema) -> String {
    let mut s = serde_json::to_string_pretty(schema).unwrap_or_default();
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::{NON_STANDARD_FORMATS, documents, schema_for};

    #[test]
    fn integers_carry_no_non_standard_format_and_unsigned_ones_a_minimum() {
        let s = serde_json::to_value(schema_for::<crate::entry::StopTimings>()).unwrap();
        assert_eq!(s["$schema"], "https://json-schema.org/draft/2020-12/schema");
        let ms = &s["properties"]["termGraceMs"];
        assert_eq!(ms["type"], "integer");
        assert_eq!(ms.get("format"), None, "{ms}");
        assert_eq!(ms["minimum"], 0);
        let text = serde_json::to_string(&serde_json::to_value(documents()).unwrap()).unwrap();
        for f in NON_STANDARD_FORMATS {
            assert!(!text.contains(&format!("\"format\":\"{f}\"")), "format {f} left");
        }
    }
}
