//! S3-compatible object stores (being written: this placeholder refuses every URL).

use super::{Listed, Location, LocationError};

/// An S3 bucket and prefix.
#[derive(Debug)]
pub struct S3Location {
    url: String,
}

impl S3Location {
    /// Refuses: not built yet.
    pub fn open(spec: &str) -> Result<S3Location, LocationError> {
        Err(LocationError::Url {
            url: spec.to_owned(),
            detail: "S3 locations are not available in this build".into(),
        })
    }
}

impl Location for S3Location {
    fn put(&self, _: &str, _: &[u8]) -> Result<(), LocationError> {
        Err(self.unavailable())
    }
    fn get(&self, _: &str) -> Result<Option<bytes::Bytes>, LocationError> {
        Err(self.unavailable())
    }
    fn list(&self, _: &str) -> Result<Vec<Listed>, LocationError> {
        Err(self.unavailable())
    }
    fn delete(&self, _: &str) -> Result<(), LocationError> {
        Err(self.unavailable())
    }
    fn describe(&self) -> String {
        self.url.clone()
    }
}

impl S3Location {
    fn unavailable(&self) -> LocationError {
        LocationError::Url {
            url: self.url.clone(),
            detail: "S3 locations are not available in this build".into(),
        }
    }
}
