-- {{p}}q_ready is clustered in lease order: its primary key becomes
-- (topic, priority, due, seq), the key lease_order (the same columns) is
-- dropped, and a secondary key due_order (topic, due, seq) keeps the
-- topic's oldest ready message one index dive away.
--
-- Why: InnoDB leaves a deleted row's index records delete-marked until
-- purge removes them, a second or so later under load. A lease read
-- q_ready through the secondary key lease_order, and a delete-marked
-- secondary record costs a look at its clustered row (about two page
-- accesses) before the scan can pass it: right after a burst of leases a
-- lease of the drained topic touched 1,000 - 6,000 pages (0.4 - 2.3 ms)
-- instead of 2. Delete-marked records of the clustered index itself sit
-- side by side in its leaf pages, tens to a page, and are passed where
-- they lie.
--
-- Every writer already knows a ready row's priority (a message's
-- priority never changes after its insert, and its q_ready row is always
-- written with it), so this version's servers delete q_ready rows by the
-- whole new key. Servers of version 11 and older lease with FORCE INDEX
-- (lease_order): on this schema their leases fail (their sends, acks and
-- everything else keep working) until they are replaced; stop them
-- before migrating to have no failed lease at all.
--
-- One ALTER (a table rebuild: InnoDB cannot change a primary key in
-- place), run by a procedure that looks first, so that the migration can
-- be run again after an interruption.
DROP PROCEDURE IF EXISTS {{p}}migrate_ready_order
--;
CREATE PROCEDURE {{p}}migrate_ready_order()
MODIFIES SQL DATA
BEGIN
  IF NOT EXISTS (SELECT 1 FROM information_schema.statistics
                  WHERE table_schema = DATABASE() AND table_name = '{{p}}q_ready'
                    AND index_name = 'PRIMARY' AND column_name = 'priority') THEN
    IF EXISTS (SELECT 1 FROM information_schema.statistics
                WHERE table_schema = DATABASE() AND table_name = '{{p}}q_ready' AND index_name = 'lease_order') THEN
      ALTER TABLE {{p}}q_ready DROP PRIMARY KEY, ADD PRIMARY KEY (topic, priority, due, seq),
        DROP KEY lease_order, ADD KEY due_order (topic, due, seq);
    ELSE
      ALTER TABLE {{p}}q_ready DROP PRIMARY KEY, ADD PRIMARY KEY (topic, priority, due, seq),
        ADD KEY due_order (topic, due, seq);
    END IF;
  END IF;
END
--;
CALL {{p}}migrate_ready_order()
--;
DROP PROCEDURE {{p}}migrate_ready_order
