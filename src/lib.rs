pub mod clock;
pub mod policy;
pub mod store;
pub mod window;
