//! `homebased metrics`: the daemon's Prometheus exposition (SPEC section 11), read through
//! its socket. Printed as the text format itself (what a person greps, or a textfile
//! collector reads); under `--json` the text travels in an object, as every `--json`
//! answer is one.

use super::Printed;
use crate::client::Client;
use homebased_shared::error::ApiResult;

pub async fn run(client: &Client) -> ApiResult<Printed> {
    let text = client.metrics().await?;
    let json = serde_json::json!(homebased_shared::wire::Versioned::new(serde_json::json!({
        "content_type": crate::metrics::CONTENT_TYPE,
        "exposition": text,
    })));
    Ok(Printed::new(json, vec![], text.trim_end()))
}
