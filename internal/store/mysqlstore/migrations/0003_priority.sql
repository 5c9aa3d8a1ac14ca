-- Message priority within a topic (store.Record.Priority, 0-255, 0 the
-- default and first): a lease takes the due ready messages in (priority,
-- due, seq) order; promotion stays (due, seq). Existing rows get
-- priority 0. The DDL runs in a procedure that looks before it adds, so
-- that the migration can be run again after an interruption (MySQL has no
-- ADD COLUMN IF NOT EXISTS; MariaDB's is not portable).
--
-- The procedure {{p}}send (schema 2) stays as it was, grants included,
-- and sends at priority 0; {{p}}send_priority takes a priority.
-- Servers of the previous version keep working on this schema (they name
-- their columns), leasing in (due, seq) order.
DROP PROCEDURE IF EXISTS {{p}}migrate_priority
--;
CREATE PROCEDURE {{p}}migrate_priority()
MODIFIES SQL DATA
BEGIN
  IF NOT EXISTS (SELECT 1 FROM information_schema.columns
                  WHERE table_schema = DATABASE() AND table_name = '{{p}}message' AND column_name = 'priority') THEN
    ALTER TABLE {{p}}message ADD COLUMN priority TINYINT UNSIGNED NOT NULL DEFAULT 0;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM information_schema.columns
                  WHERE table_schema = DATABASE() AND table_name = '{{p}}tombstone' AND column_name = 'priority') THEN
    ALTER TABLE {{p}}tombstone ADD COLUMN priority TINYINT UNSIGNED NOT NULL DEFAULT 0;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM information_schema.columns
                  WHERE table_schema = DATABASE() AND table_name = '{{p}}q_ready' AND column_name = 'priority') THEN
    ALTER TABLE {{p}}q_ready ADD COLUMN priority TINYINT UNSIGNED NOT NULL DEFAULT 0;
  END IF;
  -- The lease order. A lease is one range read of it from the topic's
  -- first entry that stops after the batch, however many priorities are
  -- in use; it passes over the rare ready rows not yet due. The primary
  -- key (topic, due, seq) stays: deletes use it, and the topic's oldest
  -- ready message (whatever its priority) is its first entry.
  IF NOT EXISTS (SELECT 1 FROM information_schema.statistics
                  WHERE table_schema = DATABASE() AND table_name = '{{p}}q_ready' AND index_name = 'lease_order') THEN
    ALTER TABLE {{p}}q_ready ADD KEY lease_order (topic, priority, due, seq);
  END IF;
END
--;
CALL {{p}}migrate_priority()
--;
DROP PROCEDURE {{p}}migrate_priority
--;
-- {{p}}send_priority is {{p}}send with a priority: 0-255, lower first
-- among the topic's due messages (0, {{p}}send's, is the default).
--
--   CALL delayq_send_priority('orders', 'order-42', '{"n":1}', 5000, 0, 1, @id, @dup, @due);
--   SELECT @id, @dup, @due;
DROP PROCEDURE IF EXISTS {{p}}send_priority
--;
CREATE PROCEDURE {{p}}send_priority(
  IN p_topic VARBINARY(255), IN p_id VARBINARY(255), IN p_payload LONGBLOB,
  IN p_delay_ms BIGINT, IN p_max_attempts INT, IN p_priority INT,
  OUT o_id VARBINARY(255), OUT o_duplicate TINYINT, OUT o_due BIGINT)
MODIFIES SQL DATA
BEGIN
  DECLARE v_now BIGINT DEFAULT CAST(FLOOR(UNIX_TIMESTAMP(NOW(3)) * 1000) AS SIGNED);
  DECLARE v_due BIGINT;
  DECLARE v_state TINYINT;
  DECLARE v_seq BIGINT UNSIGNED;
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
  SET v_due = (SELECT due FROM {{p}}message WHERE topic = p_topic AND id = o_id FOR UPDATE);
  IF v_due IS NULL THEN
    SET v_due = (SELECT due FROM {{p}}tombstone WHERE topic = p_topic AND id = o_id);
  END IF;
  IF v_due IS NOT NULL THEN
    SET o_duplicate = 1;
    SET o_due = v_due;
  ELSE
    SET v_due = v_now + GREATEST(COALESCE(p_delay_ms, 0), 0);
    SET v_state = IF(v_due <= v_now, 2, 1);
    INSERT INTO {{p}}message (topic, id, state, payload, headers, due, created, updated, max_attempts, priority)
      VALUES (p_topic, o_id, v_state, COALESCE(p_payload, ''), NULL, v_due, v_now, v_now, IF(COALESCE(p_max_attempts, 0) <= 0, 25, p_max_attempts), p_priority);
    SET v_seq = LAST_INSERT_ID();
    IF v_state = 1 THEN
      INSERT INTO {{p}}q_scheduled (topic, due, seq, id) VALUES (p_topic, v_due, v_seq, o_id);
    ELSE
      INSERT INTO {{p}}q_ready (topic, due, seq, id, priority) VALUES (p_topic, v_due, v_seq, o_id, p_priority);
    END IF;
    INSERT INTO {{p}}topic (name, scheduled, ready, ver) VALUES (p_topic, v_state = 1, v_state = 2, 1)
      ON DUPLICATE KEY UPDATE scheduled = scheduled + VALUES(scheduled), ready = ready + VALUES(ready), ver = ver + 1;
    SET o_due = v_due;
  END IF;
END
