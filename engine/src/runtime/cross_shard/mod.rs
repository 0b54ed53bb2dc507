//! Commands whose wallets live on two shards, as durable steps that recovery finishes: transfers
//! ([`transfer`]: reserve on the source, credit the target, finalize or release) and payments
//! ([`payment`]: the same for confirms and refunds whose payer and merchant live apart). Each step
//! is one command on one shard, so one WAL record; the protocols are described in
//! `crate::ledger::transfer` and `crate::commerce::payment`.

mod payment;
mod transfer;
