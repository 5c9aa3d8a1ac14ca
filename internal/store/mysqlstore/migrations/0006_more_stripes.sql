-- Up to 64 count stripes per topic (8 before). A transaction holds the
-- stripe its send counted in until it commits, and a commit waits for the
-- log's flush: with all of a topic's stripes held, the next send waits a
-- commit. Application transactions that call {{p}}send (a lookup, the
-- call, reading its results, the commit: four round trips holding the
-- stripe) therefore ran at most 8 at a time per topic, which made 64
-- concurrent ones run at a quarter of the rate of plain inserts into a
-- table. Stripes are still made only as contention needs them (when none
-- is free), so a topic sent to by one transaction at a time keeps one;
-- with all 64 made, a send waits for one at random as before. A new
-- stripe's number is one of the 8 after the highest made, at random, no
-- longer the lowest not made: transactions that found none free at once
-- all picked the number the first of them was making and waited for its
-- commit, so the stripes hardly grew past the first. After the highest,
-- not in a hole: a REPEATABLE READ transaction's locking read of a stripe
-- also locks the gap before it, and would hold an insert there. Readers
-- sum whatever stripes exist, so servers of schema 5 (which make at most
-- 8) and 6 share a database.
--
-- Replaced with CREATE OR REPLACE, which keeps grants.
CREATE OR REPLACE PROCEDURE {{p}}count_send(IN p_topic VARBINARY(255), IN p_state TINYINT)
MODIFIES SQL DATA
BEGIN
  DECLARE v_stripe SMALLINT DEFAULT NULL;
  DECLARE v_deleted TINYINT DEFAULT NULL;
  DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;
  SELECT stripe INTO v_stripe FROM {{p}}topic_count WHERE topic = p_topic LIMIT 1 FOR UPDATE SKIP LOCKED;
  IF v_stripe IS NULL THEN
    -- None free: a new one, one of the 8 numbers after the highest made
    -- (by a consistent read) at random; with none left there, any at
    -- random (made: waiting for it; a hole: made). See newStripe in the
    -- Go code for why. An upsert takes the row's exclusive lock at once
    -- (INSERT IGNORE would take a shared one first, and two such
    -- upgrading to exclusive deadlock).
    SELECT COALESCE(MAX(stripe), -1) INTO v_stripe FROM {{p}}topic_count WHERE topic = p_topic;
    IF v_stripe < 63 THEN
      SET v_stripe = v_stripe + 1 + FLOOR(RAND() * LEAST(8, 63 - v_stripe));
    ELSE
      SET v_stripe = FLOOR(RAND() * 64);
    END IF;
    INSERT INTO {{p}}topic_count (topic, stripe, scheduled, ready, ver)
      VALUES (p_topic, v_stripe, p_state = 1, p_state = 2, 1)
      ON DUPLICATE KEY UPDATE scheduled = scheduled + VALUES(scheduled), ready = ready + VALUES(ready), ver = ver + 1;
  ELSE
    UPDATE {{p}}topic_count SET scheduled = scheduled + (p_state = 1), ready = ready + (p_state = 2), ver = ver + 1
      WHERE topic = p_topic AND stripe = v_stripe;
  END IF;
  SELECT deleted INTO v_deleted FROM {{p}}topic WHERE name = p_topic;
  IF v_deleted IS NULL THEN
    INSERT IGNORE INTO {{p}}topic (name) VALUES (p_topic);
  ELSEIF v_deleted = 1 THEN
    UPDATE {{p}}topic SET deleted = 0 WHERE name = p_topic AND deleted = 1;
  END IF;
END
