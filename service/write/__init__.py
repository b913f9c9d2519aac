"""The write path: the rules every write keeps, one memory, batches, field checks, transfer."""
