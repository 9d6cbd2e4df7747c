//! workcell: run untrusted work inside an isolation boundary derived from a declarative
//! sandbox.
//!
//! Data flows one way, each stage using only the ones before it: [`config`] parses and validates the YAML into a
//! [`sandbox::Sandbox`]; `derive()` narrows it per worker; [`plan`] turns a worker's
//! effective sandbox into a backend-neutral launch plan that a backend renders and runs.

pub mod agent;
pub mod audit;
pub mod backend;
pub mod cli;
pub mod config;
pub mod delivery;
pub mod egress;
pub mod fds;
pub mod held;
pub mod hostrun;
pub mod identity;
pub mod plan;
pub mod pool;
pub mod run;
pub mod sandbox;
pub mod statedir;
pub mod style;
pub mod term;
pub mod tools;
