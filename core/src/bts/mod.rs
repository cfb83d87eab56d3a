//! Branch Trace Store and the Debug Store (SDM Vol. 3B §18.4.8-18.4.9 "Branch Trace Store
//! (BTS)", "Debug Store (DS) Mechanism"; seed 001 §6.5-§11).
//!
//! - `debugctl`: IA32_DEBUGCTL (TR, BTS, BTINT, BTS_OFF_OS, BTS_OFF_USR and the bits kept for
//!   read-back), IA32_DS_AREA, and the BTS/PEBS "unavailable" bits of IA32_MISC_ENABLE.
//! - `ds_area`: the DS save area's BTS fields (64-bit and 32-bit formats) and the BTS record.
//! - `store`: the recording unit: which transfers produce a record, CPL filtering, the circular
//!   buffer (BTINT = 0), the threshold interrupt and the full buffer (BTINT = 1).
//! - `prediction`: the static model behind the record's "predicted" flag.
//! - `pebs`: the PEBS buffer fields, the record formats and the threshold / maximum rules (not
//!   yet driven by the PMU).
//!
//! All memory the BTS touches is guest *linear* memory (`LinearMemory`): IA32_DS_AREA and the
//! buffer fields hold linear addresses.

pub mod debugctl;
pub mod ds_area;
pub mod pebs;
pub mod prediction;
pub mod store;

pub use debugctl::{DebugCtl, IA32_DEBUGCTL, IA32_DS_AREA, IA32_MISC_ENABLE};
pub use ds_area::{BtsFields, BtsRecord, DsFormat};
pub use store::{BranchTraceStore, BtsStats, StoreOutcome};
