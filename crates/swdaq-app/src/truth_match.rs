//! Truth scoring lives in `swdaq_tpg::quality`. This path stays only for
//! `models/chain/system.rs`, which still imports `Score` from here; drop it when that import
//! names `swdaq_tpg::quality::Score`.

pub use swdaq_tpg::quality::Score;
