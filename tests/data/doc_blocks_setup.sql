-- The business tables the guides' SQL blocks write to, as the writer
-- examples create them (examples/python/writer.py): the throwaway database
-- of tests/integration/examples/test_doc_blocks.c has only the outbox schema.
CREATE TABLE reviews (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    movie_id uuid NOT NULL,
    stars integer NOT NULL
);
