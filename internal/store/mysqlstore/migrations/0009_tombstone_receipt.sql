-- An acked tombstone keeps the receipt that acked it (store.Record.Receipt
-- of an acked record): an ack retried with that receipt, because the
-- answer to the first was lost (a timeout, a dropped connection), is
-- answered as the first one was instead of 409. Tombstones made before
-- this version, and any not made by an ack, have none (NULL, read as an
-- empty receipt), and a retried ack of them stays a conflict.
--
-- The column is nullable with no default, the type of {{p}}message's
-- receipt, added last: the servers' inserts name their columns, so
-- servers of schema 8 keep working on this schema (their acks write
-- tombstones without a receipt). A plain ALTER: MariaDB (10.3+) and
-- MySQL (8.0.12+) add such a column instantly by default, and fall back
-- to a rebuild where they cannot (ROW_FORMAT=COMPRESSED,
-- innodb_instant_alter_column_allowed=never, MySQL's limit of instant
-- changes per table) where ALGORITHM=INSTANT would fail the migration.
-- The DDL runs in a procedure that looks before it adds, so that the
-- migration can be run again after an interruption (as 0003's).
DROP PROCEDURE IF EXISTS {{p}}migrate_tombstone_receipt
--;
CREATE PROCEDURE {{p}}migrate_tombstone_receipt()
MODIFIES SQL DATA
BEGIN
  IF NOT EXISTS (SELECT 1 FROM information_schema.columns
                  WHERE table_schema = DATABASE() AND table_name = '{{p}}tombstone' AND column_name = 'receipt') THEN
    ALTER TABLE {{p}}tombstone ADD COLUMN receipt VARBINARY(255) NULL;
  END IF;
END
--;
CALL {{p}}migrate_tombstone_receipt()
--;
DROP PROCEDURE {{p}}migrate_tombstone_receipt
