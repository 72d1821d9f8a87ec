-- subject_erasure_stream: how many of the erased subject's messages the
-- stream still held, on its erasures row. $1: erasures id; $2: that count.
UPDATE /*schema*/erasures SET stream_messages = $2::integer WHERE id = $1::bigint
