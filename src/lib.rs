pub mod clock;
pub mod policy;
pub mod window;
