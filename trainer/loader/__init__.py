"""The streaming shard loader: manifest -> partitions -> block shuffle -> batches.

The long form is docs/loader.md; the shape in brief:

* **Partitions.** The split's shards are dealt once (keyed by ``seed`` only)
  into ``partitions`` virtual streams, balanced by sample count. Each epoch a
  partition reads its shards in an order keyed by (seed, epoch, p) and
  shuffles them in fixed blocks of ``shuffle_buffer`` positions, so the batch
  sequence of a partition is a pure function of (seed, epoch, p): it does not
  depend on the world size or the number of workers.
* **Units.** Rank r owns the partitions with ``p % world_size == r``; worker w
  of a rank owns every ``num_workers``-th of those. A unit (rank, worker)
  interleaves its partitions one batch at a time (round robin). Every unit
  owns data: partitions are at least the units, and a split with fewer
  non-empty shards than units is dealt as sample ranges of its shards
  (pieces); where that cannot be done the loader refuses in one line
  (``allow_idle``: the idle units pad instead).
* **Equal steps.** Every unit yields the same number of batches per epoch (the
  largest unit's count, computed from manifest counts); a unit that runs dry
  replays its own epoch, flagged ``is_pad``. So DDP ranks never hang on uneven
  shards and every real sample is still seen exactly once per epoch. When every
  unit of every rank only replays (``replaying``), the trainer ends the epoch
  there (``end_epoch``; each source of a mix on its own): counts a corrupt
  shard claimed do not stretch it.
* **Exact resume.** Batches carry the cursor of the partition they came from,
  so the main process knows exactly what was delivered (batches prefetched by
  workers do not count). State = epoch + per-partition cursors.
* **Corrupt shards.** A shard is read once into a local spool and its bytes
  and sha256 checked against the manifest before its first sample is
  released (whatever ``shuffle_buffer`` is); its samples must decode, hold
  1..max_seq_len ids below the vocabulary size and add up to the manifest's
  sample and token counts before its last sample is released. A failure
  either raises a UserError (policy ``fail``) or turns the shard's
  not-yet-released positions into holes (policy ``skip``), recorded in the
  state so a resumed run skips the same shard. Its positions are then
  stepped over, not walked: work is bounded by the data, never by the counts
  a manifest claims.
"""


from trainer.loader.loader import CORRUPT_POLICIES, STATE_VERSION, ShardLoader, gather_state_dict

__all__ = ["CORRUPT_POLICIES", "STATE_VERSION", "ShardLoader", "gather_state_dict"]
