//! Resources: exclusive lanes. Names and device indices are unique per machine, enforced by
//! the schema; registration never tests the physical device.

use super::{bad_column, Db, DbResult};
use homebased_shared::error::{ApiError, ApiResult, ErrorCode};
use homebased_shared::ids::{looks_like_uuid, ResourceId};
use homebased_shared::time::Millis;
use homebased_shared::wire::ResourceOrigin;
use rusqlite::{OptionalExtension, Row};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    pub id: ResourceId,
    pub name: String,
    pub device: Option<u32>,
    pub origin: ResourceOrigin,
    pub created_at: Millis,
    /// The card a detected lane's device was first seen as, if recorded; for a MIG slice
    /// its MIG UUID (its CUDA device) and the card's model with the slice's profile.
    pub gpu: Option<GpuIdentity>,
    /// The MIG instance a detected slice lane is (it has no `device` then).
    pub mig: Option<crate::detection::MigPlace>,
    /// A slice's card's hardware UUID, as the last detection listed it.
    pub mig_card: Option<String>,
}

impl Resource {
    /// The CUDA device a run on this lane is given: the index, or a slice's MIG UUID.
    pub fn cuda_device(&self) -> Option<homebased_shared::wire::Device> {
        use homebased_shared::wire::Device;
        match (self.device, self.mig) {
            (Some(index), _) => Some(Device::Index(index)),
            (None, Some(_)) => self
                .gpu
                .as_ref()
                .and_then(|g| g.uuid.clone())
                .map(Device::Mig),
            (None, None) => None,
        }
    }
}

/// A detected device's identity as `nvidia-smi -L` first reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuIdentity {
    pub uuid: Option<String>,
    pub model: Option<String>,
    /// At the last start the index reported another hardware UUID (or none at all).
    pub changed: bool,
}

const COLUMNS: &str = "id, name, device, origin, created_at, gpu_uuid, gpu_model, gpu_changed, \
    mig_gpu, mig_instance, mig_card_uuid";

/// Names are 1 to 63 of `[a-z0-9-]`, not starting or ending with `-`, never a UUID.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 63 {
        return Err(format!("resource name {name:?} must be 1 to 63 characters"));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err(format!(
            "resource name {name:?} may only use a-z, 0-9 and -"
        ));
    }
    if name.starts_with('-') || name.ends_with('-') {
        return Err(format!(
            "resource name {name:?} must not start or end with -"
        ));
    }
    if looks_like_uuid(name) {
        return Err(format!("resource name {name:?} must not be a UUID"));
    }
    Ok(())
}

fn from_row(r: &Row) -> rusqlite::Result<Resource> {
    let id: String = r.get("id")?;
    let origin: String = r.get("origin")?;
    let device: Option<i64> = r.get("device")?;
    let uuid: Option<String> = r.get("gpu_uuid")?;
    let model: Option<String> = r.get("gpu_model")?;
    let changed: bool = r.get("gpu_changed")?;
    let mig_gpu: Option<u32> = r.get("mig_gpu")?;
    let mig_instance: Option<u32> = r.get("mig_instance")?;
    let mig = match (mig_gpu, mig_instance) {
        (Some(gpu), Some(instance)) => Some(crate::detection::MigPlace { gpu, instance }),
        (None, None) => None,
        _ => {
            return Err(bad_column(
                "mig_instance",
                "a MIG place needs both its card and instance",
            ))
        }
    };
    let gpu = (uuid.is_some() || model.is_some()).then_some(GpuIdentity {
        uuid,
        model,
        changed,
    });
    Ok(Resource {
        id: id.parse().map_err(|e| bad_column("id", e))?,
        name: r.get("name")?,
        device: device.map(|d| d as u32),
        origin: origin
            .parse()
            .map_err(|e: String| bad_column("origin", e))?,
        created_at: r.get("created_at")?,
        gpu,
        mig,
        mig_card: r.get("mig_card_uuid")?,
    })
}

/// Every resource, in resource order (lowest device index, then natural name order).
pub fn list(db: Db) -> ApiResult<Vec<Resource>> {
    match db.rows {
        Some(cache) => cache.resources(db, read_all),
        None => read_all(db),
    }
}

fn read_all(db: Db) -> ApiResult<Vec<Resource>> {
    let mut stmt = db
        .conn
        .prepare_cached(&format!("SELECT {COLUMNS} FROM resources"))
        .db("list resources")?;
    let mut rows: Vec<Resource> = stmt
        .query_map([], from_row)
        .db("list resources")?
        .collect::<Result<_, _>>()
        .db("list resources")?;
    rows.sort_by(|a, b| {
        let key = |r: &Resource| (r.device.is_none(), r.device);
        key(a)
            .cmp(&key(b))
            .then_with(|| a.mig.cmp(&b.mig))
            .then_with(|| crate::scheduler::natural_cmp(&a.name, &b.name))
    });
    Ok(rows)
}

pub fn get(db: Db, id: ResourceId) -> ApiResult<Option<Resource>> {
    db.conn
        .query_row(
            &format!("SELECT {COLUMNS} FROM resources WHERE id = ?1"),
            [id.to_string()],
            from_row,
        )
        .optional()
        .db("read resource")
}

/// Finds a resource by UUID or by name.
pub fn find(db: Db, name_or_id: &str) -> ApiResult<Option<Resource>> {
    if let Ok(id) = name_or_id.parse::<ResourceId>() {
        return get(db, id);
    }
    db.conn
        .query_row(
            &format!("SELECT {COLUMNS} FROM resources WHERE name = ?1"),
            [name_or_id],
            from_row,
        )
        .optional()
        .db("read resource")
}

/// Adds a lane; a taken name or device is `resource_conflict` and changes nothing.
pub fn insert(
    db: Db,
    name: &str,
    device: Option<u32>,
    origin: ResourceOrigin,
) -> ApiResult<Resource> {
    check_unique(db, name, device, None)?;
    let resource = Resource {
        id: ResourceId::new(),
        name: name.to_string(),
        device,
        origin,
        created_at: db.now(),
        gpu: None,
        mig: None,
        mig_card: None,
    };
    db.conn.execute(
        "INSERT INTO resources (id, name, device, origin, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
        (
            resource.id.to_string(),
            &resource.name,
            device.map(i64::from),
            origin.as_str(),
            resource.created_at,
        ),
    )
    .db("insert resource")?;
    Ok(resource)
}

fn check_unique(
    db: Db,
    name: &str,
    device: Option<u32>,
    except: Option<ResourceId>,
) -> ApiResult<()> {
    let except = except.map(|e| e.to_string()).unwrap_or_default();
    let name_taken: bool = db
        .conn
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM resources WHERE name = ?1 AND id <> ?2)",
            (name, &except),
            |r| r.get(0),
        )
        .db("check resource name")?;
    if name_taken {
        return Err(ApiError::new(
            ErrorCode::ResourceConflict,
            format!("a resource named {name:?} already exists"),
        )
        .with_input(serde_json::json!({ "name": name })));
    }
    if let Some(device) = device {
        let device_taken: bool = db
            .conn
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM resources WHERE device = ?1 AND id <> ?2)",
                (i64::from(device), &except),
                |r| r.get(0),
            )
            .db("check resource device")?;
        if device_taken {
            return Err(ApiError::new(
                ErrorCode::ResourceConflict,
                format!("device {device} already has a lane; do not register another for it"),
            )
            .with_input(serde_json::json!({ "device": device })));
        }
    }
    Ok(())
}

/// Adds the lane of one MIG instance; a taken name is `resource_conflict`.
pub fn insert_slice(db: Db, name: &str, place: crate::detection::MigPlace) -> ApiResult<Resource> {
    check_unique(db, name, None, None)?;
    let resource = Resource {
        id: ResourceId::new(),
        name: name.to_string(),
        device: None,
        origin: ResourceOrigin::Detected,
        created_at: db.now(),
        gpu: None,
        mig: Some(place),
        mig_card: None,
    };
    db.conn
        .execute(
            "INSERT INTO resources (id, name, device, origin, created_at, mig_gpu, mig_instance) \
             VALUES (?1, ?2, NULL, 'detected', ?3, ?4, ?5)",
            (
                resource.id.to_string(),
                &resource.name,
                resource.created_at,
                place.gpu,
                place.instance,
            ),
        )
        .db("insert MIG resource")?;
    Ok(resource)
}

/// Gives a fallback lane its detected device, keeping its UUID.
pub fn adopt(db: Db, id: ResourceId, new_name: Option<&str>, device: u32) -> ApiResult<()> {
    let current = get(db, id)?
        .ok_or_else(|| ApiError::internal(format!("fallback resource {id} vanished")))?;
    let name = new_name.unwrap_or(&current.name);
    check_unique(db, name, Some(device), Some(id))?;
    db.conn
        .execute(
            "UPDATE resources SET name = ?2, device = ?3, origin = 'detected' WHERE id = ?1",
            (id.to_string(), name, i64::from(device)),
        )
        .db("adopt fallback")?;
    Ok(())
}

/// Records which card a slice lane is cut from now (its card's hardware UUID).
pub fn set_mig_card(db: Db, id: ResourceId, card: Option<&str>) -> ApiResult<()> {
    db.conn
        .execute(
            "UPDATE resources SET mig_card_uuid = ?2 WHERE id = ?1",
            (id.to_string(), card),
        )
        .db("record a MIG slice's card")?;
    Ok(())
}

/// Records the card a lane's device is (first sight, or the flag after another start).
pub fn set_gpu(db: Db, id: ResourceId, gpu: &GpuIdentity) -> ApiResult<()> {
    db.conn
        .execute(
            "UPDATE resources SET gpu_uuid = ?2, gpu_model = ?3, gpu_changed = ?4 WHERE id = ?1",
            (id.to_string(), &gpu.uuid, &gpu.model, gpu.changed),
        )
        .db("record GPU identity")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_store;

    #[test]
    fn names_follow_the_rules() {
        for ok in ["gpu0", "auxiliary", "a", "a-b-9", &"x".repeat(63)] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        let uuid = ResourceId::new().to_string();
        for bad in [
            "",
            "-a",
            "a-",
            "GPU0",
            "gpu_0",
            "gpu 0",
            &"x".repeat(64),
            uuid.as_str(),
        ] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn name_and_device_conflicts_change_nothing() {
        let (_dir, store) = test_store();
        let c = store.db();
        insert(c, "gpu0", Some(0), ResourceOrigin::Detected).unwrap();
        assert_eq!(
            insert(c, "gpu0", None, ResourceOrigin::Manual)
                .unwrap_err()
                .code,
            ErrorCode::ResourceConflict
        );
        assert_eq!(
            insert(c, "other", Some(0), ResourceOrigin::Manual)
                .unwrap_err()
                .code,
            ErrorCode::ResourceConflict
        );
        assert_eq!(list(c).unwrap().len(), 1);
    }

    #[test]
    fn listed_by_device_then_natural_name() {
        let (_dir, store) = test_store();
        let c = store.db();
        insert(c, "gpu10", None, ResourceOrigin::Manual).unwrap();
        insert(c, "gpu2", None, ResourceOrigin::Manual).unwrap();
        insert(c, "b", Some(1), ResourceOrigin::Manual).unwrap();
        insert(c, "a", Some(3), ResourceOrigin::Manual).unwrap();
        let names: Vec<_> = list(c).unwrap().into_iter().map(|r| r.name).collect();
        assert_eq!(names, ["b", "a", "gpu2", "gpu10"]);
    }
}
