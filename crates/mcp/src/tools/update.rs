//! `process_update`: attach, replace or remove (`null`) a cleanup, or rename.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};

use crate::server::{CleanupArg, Ctx, Done, Proc, ToolError, find, proc_of, sentence};
use sheepdog::manager::{self, UpdateRequest};

/// `Some(None)` for an explicit `null`, `None` when absent.
pub(crate) fn explicit_null<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// `cleanup` in `process_update`: a cleanup, or `null` to remove it (the one `null` an
/// argument takes, as a `oneOf`).
pub(crate) fn cleanup_or_null(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let cleanup = g.subschema_for::<CleanupArg>();
    schemars::json_schema!({
        "description": "Attach or replace the cleanup command (an object), or null to remove it.",
        "oneOf": [cleanup, {"type": "null"}]
    })
}

/// Arguments of `process_update`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpdateArgs {
    /// Id (proc_N) or name.
    pub id: String,
    /// Attach or replace the cleanup command, or `null` to remove it.
    #[serde(default, deserialize_with = "explicit_null")]
    #[schemars(schema_with = "cleanup_or_null")]
    pub cleanup: Option<Option<CleanupArg>>,
    /// Rename (unique among running processes).
    pub name: Option<String>,
}

/// Result of `process_update`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdateResult {
    /// The process after the change.
    #[serde(flatten)]
    pub process: Proc,
}

pub(crate) fn update(ctx: &Ctx, a: UpdateArgs) -> Result<Done<UpdateResult>, ToolError> {
    if a.cleanup.is_none() && a.name.is_none() {
        return Err("Nothing to update: give `cleanup` (an object, or null to remove it) or `name`.".into());
    }
    if let Some(n) = &a.name {
        sheepdog::entry::check_name(n).map_err(|e| sentence(&e))?;
    }
    if let Some(Some(c)) = &a.cleanup
        && c.command.trim().is_empty()
    {
        return Err("`cleanup.command` is empty: give a command, or `cleanup: null` to remove the cleanup.".into());
    }
    let e = find(&ctx.reg, &a.id)?;
    let req = UpdateRequest {
        cleanup: a.cleanup.as_ref().map(|c| c.as_ref().map(|c| c.command.clone())),
        cleanup_timeout: a
            .cleanup
            .as_ref()
            .and_then(|c| c.as_ref())
            .and_then(|c| c.timeout_ms)
            .map(Duration::from_millis),
        name: a.name,
    };
    let e = manager::update(&ctx.reg, &e, &req).map_err(|e| sentence(&e.to_string()))?;
    let what = match &a.cleanup {
        Some(None) => "; cleanup removed".to_string(),
        Some(Some(c)) => format!("; cleanup: sh -c {:?}", c.command),
        None => String::new(),
    };
    Ok(Done::ok(UpdateResult { process: proc_of(&ctx.reg, &e, false) }, format!("Updated {}{what}.", e.label())))
}
