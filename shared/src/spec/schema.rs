//! The JSON Schema of the job spec, printed by `resource schema`.

pub fn json_schema() -> serde_json::Value {
    serde_json::json!({})
}
