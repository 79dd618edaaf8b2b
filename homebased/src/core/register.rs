//! `resource register`: add a manual lane (socket only, local only).

use super::Core;
use crate::store::resources;
use homebased_shared::error::{ApiError, ApiResult, ErrorCode};
use homebased_shared::wire::{RegisterRequest, ResourceOrigin, ResourceView};

impl Core {
    pub(super) fn register(&mut self, req: RegisterRequest) -> ApiResult<ResourceView> {
        resources::check_name(&req.name).map_err(|message| {
            ApiError::new(ErrorCode::InvalidQueueInput, message)
                .with_input(serde_json::json!({ "name": req.name }))
        })?;
        let resource = self
            .store
            .write(|tx| resources::insert(tx, &req.name, req.device, ResourceOrigin::Manual))?;
        tracing::info!(name = %resource.name, device = ?resource.device, "registered resource");
        self.mark_dirty();
        Ok(super::views::resource_view(resource, None))
    }
}
