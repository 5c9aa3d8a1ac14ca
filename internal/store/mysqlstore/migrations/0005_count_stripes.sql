-- Counts in stripes. A topic's counts and its wake-up counter ver were
-- columns of its {{p}}topic row, which every operation on the topic
-- updated: a row lock held to the end of the transaction. An application
-- transaction that called {{p}}send therefore held every other send,
-- lease and ack of that topic until it committed (a 5 s transaction
-- stalled the topic's consumers for 5 s). Changes now go to one of the 8
-- rows of {{p}}topic_count per topic, the first one no other
-- transaction holds (FOR UPDATE SKIP LOCKED), so a long transaction holds
-- one stripe and nothing waits for it. Reads add the stripes to the
-- topic row's columns, which servers of the previous version keep
-- writing during a rolling upgrade.
--
-- {{p}}send and {{p}}send_priority are replaced with CREATE OR REPLACE,
-- which keeps the EXECUTE grants applications hold on them (DROP would
-- revoke them). Their reads no longer lock: in the caller's transaction
-- at REPEATABLE READ (MariaDB's default), a SELECT … FOR UPDATE of an id
-- not yet sent, and a SET from a subquery, took next-key locks that held
-- other transactions' inserts into those key ranges (other ids' sends,
-- acks' tombstones, of any topic) until the caller committed. Reads are
-- SELECT … INTO (consistent), and a message already holding the id is
-- found by the insert's duplicate-key check.
CREATE TABLE IF NOT EXISTS {{p}}topic_count (
  topic     VARBINARY(255) NOT NULL,
  stripe    SMALLINT NOT NULL,
  scheduled BIGINT NOT NULL DEFAULT 0,
  ready     BIGINT NOT NULL DEFAULT 0,
  inflight  BIGINT NOT NULL DEFAULT 0,
  dead      BIGINT NOT NULL DEFAULT 0,
  acked     BIGINT NOT NULL DEFAULT 0,
  ver       BIGINT NOT NULL DEFAULT 0,
  PRIMARY KEY (topic, stripe)
) ENGINE=InnoDB
--;
-- count_send counts one message sent to p_topic in state p_state (1
-- scheduled, 2 ready) in a free stripe (with none free, in a new one, up
-- to 8), makes the topic's row when
-- it has none and clears a deletion mark (see TopicDelete), each after a
-- consistent read, so a row that needs neither is not locked: at
-- REPEATABLE READ even an UPDATE that matches nothing keeps its lock.
-- A topic's stripes are made as contention needs them, at most 8; while
-- they are being made, an insert can wait on the gap lock of a REPEATABLE
-- READ transaction's locking read (once all 8 exist, nothing inserts).
CREATE OR REPLACE PROCEDURE {{p}}count_send(IN p_topic VARBINARY(255), IN p_state TINYINT)
MODIFIES SQL DATA
BEGIN
  DECLARE v_stripe SMALLINT DEFAULT NULL;
  DECLARE v_deleted TINYINT DEFAULT NULL;
  DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;
  SELECT stripe INTO v_stripe FROM {{p}}topic_count WHERE topic = p_topic LIMIT 1 FOR UPDATE SKIP LOCKED;
  IF v_stripe IS NULL THEN
    -- None free: a new one (the lowest number not made yet, by a
    -- consistent read), or with all 8 made one at random, waiting for it.
    -- An upsert takes the row's exclusive lock at once (INSERT IGNORE
    -- would take a shared one first, and two such upgrading to exclusive
    -- deadlock).
    SELECT COALESCE(MIN(n.k), FLOOR(RAND() * 8)) INTO v_stripe
      FROM (SELECT 0 k UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3
            UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7) n
     WHERE n.k NOT IN (SELECT c.stripe FROM {{p}}topic_count c WHERE c.topic = p_topic);
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
--;
-- {{p}}send is {{p}}send_priority at priority 0.
CREATE OR REPLACE PROCEDURE {{p}}send(
  IN p_topic VARBINARY(255), IN p_id VARBINARY(255), IN p_payload LONGBLOB,
  IN p_delay_ms BIGINT, IN p_max_attempts INT,
  OUT o_id VARBINARY(255), OUT o_duplicate TINYINT, OUT o_due BIGINT)
MODIFIES SQL DATA
BEGIN
  CALL {{p}}send_priority(p_topic, p_id, p_payload, p_delay_ms, p_max_attempts, 0, o_id, o_duplicate, o_due);
END
--;
CREATE OR REPLACE PROCEDURE {{p}}send_priority(
  IN p_topic VARBINARY(255), IN p_id VARBINARY(255), IN p_payload LONGBLOB,
  IN p_delay_ms BIGINT, IN p_max_attempts INT, IN p_priority INT,
  OUT o_id VARBINARY(255), OUT o_duplicate TINYINT, OUT o_due BIGINT)
MODIFIES SQL DATA
BEGIN
  DECLARE v_now BIGINT DEFAULT CAST(FLOOR(UNIX_TIMESTAMP(NOW(3)) * 1000) AS SIGNED);
  DECLARE v_due BIGINT;
  DECLARE v_state TINYINT;
  DECLARE v_seq BIGINT UNSIGNED;
  DECLARE v_taken TINYINT DEFAULT 0;
  -- The id is already a message: the insert below fails with 1062.
  DECLARE CONTINUE HANDLER FOR 1062 SET v_taken = 1;
  -- SELECT … INTO found nothing: the variable stays NULL.
  DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;
  IF p_topic IS NULL OR p_topic = '' THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'delayq_send: topic is required';
  END IF;
  IF p_id = '' THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'delayq_send: id must not be empty (NULL generates one)';
  END IF;
  IF p_priority IS NULL OR p_priority < 0 OR p_priority > 255 THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'delayq_send: priority must be 0 to 255';
  END IF;
  SET o_id = p_id;
  IF o_id IS NULL THEN
    SET o_id = CAST(UUID() AS CHAR);
  END IF;
  SET o_duplicate = 0;
  -- Duplicate checks that lock nothing that does not exist (see the top
  -- of this file): the tombstone read is consistent, and a message with
  -- this id is found by the insert's own key check, which waits for a
  -- concurrent send of the same id and then fails if it committed.
  SELECT due INTO v_due FROM {{p}}tombstone WHERE topic = p_topic AND id = o_id;
  IF v_due IS NOT NULL THEN
    SET o_duplicate = 1;
    SET o_due = v_due;
  ELSE
    SET v_due = v_now + GREATEST(COALESCE(p_delay_ms, 0), 0);
    SET v_state = IF(v_due <= v_now, 2, 1);
    INSERT INTO {{p}}message (topic, id, state, payload, headers, due, created, updated, max_attempts, priority)
      VALUES (p_topic, o_id, v_state, COALESCE(p_payload, ''), NULL, v_due, v_now, v_now, IF(COALESCE(p_max_attempts, 0) <= 0, 25, p_max_attempts), p_priority);
    IF v_taken = 1 THEN
      SET v_due = NULL;
      SELECT due INTO v_due FROM {{p}}message WHERE topic = p_topic AND id = o_id LOCK IN SHARE MODE;
      IF v_due IS NULL THEN -- acked since the insert's check
        SELECT due INTO v_due FROM {{p}}tombstone WHERE topic = p_topic AND id = o_id;
      END IF;
      SET o_duplicate = 1;
      SET o_due = v_due;
    ELSE
      SET v_seq = LAST_INSERT_ID();
      IF v_state = 1 THEN
        INSERT INTO {{p}}q_scheduled (topic, due, seq, id) VALUES (p_topic, v_due, v_seq, o_id);
      ELSE
        INSERT INTO {{p}}q_ready (topic, due, seq, id, priority) VALUES (p_topic, v_due, v_seq, o_id, p_priority);
      END IF;
      CALL {{p}}count_send(p_topic, v_state);
      SET o_due = v_due;
    END IF;
  END IF;
END
