-- {{p}}send_many: a batch of messages to one topic in one CALL, inside the
-- application's transaction, for any language. Sending a batch through
-- {{p}}send costs two round trips per message (the CALL and the SELECT of
-- its OUT variables) and a count row each; this is one CALL and one
-- SELECT for the batch, and one count row.
--
-- p_messages is a JSON array of objects, in send order:
--   {"id": "order-43", "payload": "<base64>", "delay_ms": 1800000,
--    "max_attempts": 0, "priority": 0}
-- Every field may be left out: id (or null) generates a UUID, payload
-- (base64, so any bytes) defaults to empty, delay_ms to 0 (due now),
-- max_attempts to 25, priority to 0. o_results is a JSON array with one
-- [id, duplicate (0/1), due (Unix ms)] per message, in the same order.
--
-- Each message is sent as {{p}}send_priority sends one (the same
-- duplicate checks, which lock nothing that does not exist; an id that
-- repeats within the batch is a duplicate of its first occurrence), and
-- a malformed element fails the whole call naming its position, before
-- or after some rows were inserted: the caller rolls back.
CREATE OR REPLACE PROCEDURE {{p}}send_many(
  IN p_topic VARBINARY(255), IN p_messages LONGTEXT CHARACTER SET utf8mb4,
  OUT o_results LONGTEXT CHARACTER SET utf8mb4)
MODIFIES SQL DATA
BEGIN
  DECLARE v_now BIGINT DEFAULT CAST(FLOOR(UNIX_TIMESTAMP(NOW(3)) * 1000) AS SIGNED);
  DECLARE v_done TINYINT DEFAULT 0;
  DECLARE v_pos INT;
  DECLARE v_elem LONGTEXT CHARACTER SET utf8mb4;
  DECLARE v_field LONGTEXT CHARACTER SET utf8mb4;
  DECLARE v_id_text LONGTEXT CHARACTER SET utf8mb4;
  DECLARE v_delay BIGINT;
  DECLARE v_max INT;
  DECLARE v_priority INT;
  DECLARE v_id VARBINARY(255);
  DECLARE v_payload LONGBLOB;
  DECLARE v_due BIGINT;
  DECLARE v_state TINYINT;
  DECLARE v_seq BIGINT UNSIGNED;
  DECLARE v_dup TINYINT;
  DECLARE v_taken TINYINT DEFAULT 0;
  DECLARE v_sched BIGINT DEFAULT 0;
  DECLARE v_ready BIGINT DEFAULT 0;
  DECLARE v_deleted TINYINT DEFAULT NULL;
  DECLARE v_msg VARCHAR(255);
  DECLARE c_messages CURSOR FOR
    SELECT j.pos, j.elem
      FROM JSON_TABLE(p_messages, '$[*]' COLUMNS (pos FOR ORDINALITY, elem JSON PATH '$')) j
     ORDER BY j.pos;
  DECLARE CONTINUE HANDLER FOR 1062 SET v_taken = 1;
  -- Both the cursor's end and a SELECT … INTO that found nothing: v_done
  -- is reset before each FETCH and read right after it.
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
  IF p_topic IS NULL OR p_topic = '' THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'delayq_send_many: topic is required';
  END IF;
  IF p_messages IS NULL OR JSON_VALID(p_messages) = 0 OR JSON_TYPE(p_messages) <> 'ARRAY' THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'delayq_send_many: messages must be a JSON array of objects';
  END IF;
  SET o_results = '[]';
  OPEN c_messages;
  send_loop: LOOP
    SET v_done = 0;
    FETCH c_messages INTO v_pos, v_elem;
    IF v_done = 1 THEN
      LEAVE send_loop;
    END IF;
    IF COALESCE(JSON_TYPE(v_elem), '') <> 'OBJECT' THEN
      SET v_msg = CONCAT('delayq_send_many: message ', v_pos - 1, ' is not a JSON object');
      SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
    END IF;
    -- Each field: absent or null takes the default; any other type than
    -- the one documented is refused rather than converted.
    SET v_id_text = NULL;
    SET v_field = JSON_EXTRACT(v_elem, '$.id');
    IF v_field IS NOT NULL AND JSON_TYPE(v_field) <> 'NULL' THEN
      IF JSON_TYPE(v_field) <> 'STRING' THEN
        SET v_msg = CONCAT('delayq_send_many: message ', v_pos - 1, ': id must be a string');
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
      END IF;
      SET v_id_text = JSON_UNQUOTE(v_field);
      IF v_id_text = '' THEN
        SET v_msg = CONCAT('delayq_send_many: message ', v_pos - 1, ': id must not be empty (null or absent generates one)');
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
      END IF;
      IF LENGTH(v_id_text) > 255 THEN
        SET v_msg = CONCAT('delayq_send_many: message ', v_pos - 1, ': id longer than 255 bytes');
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
      END IF;
    END IF;
    SET v_payload = '';
    SET v_field = JSON_EXTRACT(v_elem, '$.payload');
    IF v_field IS NOT NULL AND JSON_TYPE(v_field) <> 'NULL' THEN
      IF JSON_TYPE(v_field) <> 'STRING' THEN
        SET v_msg = CONCAT('delayq_send_many: message ', v_pos - 1, ': payload must be a base64 string');
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
      END IF;
      BEGIN
        -- FROM_BASE64 raises 1958 on bad input in strict mode, NULL otherwise.
        DECLARE EXIT HANDLER FOR 1958 SET v_payload = NULL;
        SET v_payload = FROM_BASE64(JSON_UNQUOTE(v_field));
      END;
      IF v_payload IS NULL THEN
        SET v_msg = CONCAT('delayq_send_many: message ', v_pos - 1, ': payload is not base64');
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
      END IF;
    END IF;
    SET v_delay = 0;
    SET v_field = JSON_EXTRACT(v_elem, '$.delay_ms');
    IF v_field IS NOT NULL AND JSON_TYPE(v_field) <> 'NULL' THEN
      IF JSON_TYPE(v_field) <> 'INTEGER' THEN
        SET v_msg = CONCAT('delayq_send_many: message ', v_pos - 1, ': delay_ms must be an integer');
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
      END IF;
      SET v_delay = CAST(v_field AS SIGNED);
    END IF;
    SET v_max = 0;
    SET v_field = JSON_EXTRACT(v_elem, '$.max_attempts');
    IF v_field IS NOT NULL AND JSON_TYPE(v_field) <> 'NULL' THEN
      IF JSON_TYPE(v_field) <> 'INTEGER' OR CAST(v_field AS SIGNED) > 2147483647 THEN
        SET v_msg = CONCAT('delayq_send_many: message ', v_pos - 1, ': max_attempts must be an integer below 2^31');
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
      END IF;
      SET v_max = GREATEST(CAST(v_field AS SIGNED), 0);
    END IF;
    SET v_priority = 0;
    SET v_field = JSON_EXTRACT(v_elem, '$.priority');
    IF v_field IS NOT NULL AND JSON_TYPE(v_field) <> 'NULL' THEN
      IF JSON_TYPE(v_field) <> 'INTEGER' OR CAST(v_field AS SIGNED) NOT BETWEEN 0 AND 255 THEN
        SET v_msg = CONCAT('delayq_send_many: message ', v_pos - 1, ': priority must be 0 to 255');
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
      END IF;
      SET v_priority = CAST(v_field AS SIGNED);
    END IF;
    SET v_id = CONVERT(v_id_text USING binary);
    IF v_id IS NULL THEN
      SET v_id = CAST(UUID() AS CHAR);
    END IF;
    SET v_dup = 0;
    SET v_due = NULL;
    -- The same checks as {{p}}send_priority's: a consistent read of the
    -- tombstone, and the insert's own key check for a live message.
    SELECT due INTO v_due FROM {{p}}tombstone WHERE topic = p_topic AND id = v_id;
    IF v_due IS NOT NULL THEN
      SET v_dup = 1;
    ELSE
      SET v_due = v_now + GREATEST(COALESCE(v_delay, 0), 0);
      SET v_state = IF(v_due <= v_now, 2, 1);
      SET v_taken = 0;
      INSERT INTO {{p}}message (topic, id, state, payload, headers, due, created, updated, max_attempts, priority)
        VALUES (p_topic, v_id, v_state, v_payload, NULL, v_due, v_now, v_now, IF(COALESCE(v_max, 0) <= 0, 25, v_max), v_priority);
      IF v_taken = 1 THEN
        SET v_dup = 1;
        SET v_due = NULL;
        SELECT due INTO v_due FROM {{p}}message WHERE topic = p_topic AND id = v_id LOCK IN SHARE MODE;
        IF v_due IS NULL THEN -- acked since the insert's check
          SELECT due INTO v_due FROM {{p}}tombstone WHERE topic = p_topic AND id = v_id;
        END IF;
      ELSE
        SET v_seq = LAST_INSERT_ID();
        IF v_state = 1 THEN
          INSERT INTO {{p}}q_scheduled (topic, due, seq, id) VALUES (p_topic, v_due, v_seq, v_id);
          SET v_sched = v_sched + 1;
        ELSE
          INSERT INTO {{p}}q_ready (topic, due, seq, id, priority) VALUES (p_topic, v_due, v_seq, v_id, v_priority);
          SET v_ready = v_ready + 1;
        END IF;
      END IF;
    END IF;
    SET o_results = JSON_ARRAY_APPEND(o_results, '$', JSON_ARRAY(CONVERT(v_id USING utf8mb4), CAST(v_dup AS SIGNED), CAST(v_due AS SIGNED)));
  END LOOP;
  CLOSE c_messages;
  -- One count row for the batch, as {{p}}count_send makes one per message.
  IF v_sched + v_ready > 0 THEN
    INSERT INTO {{p}}topic_count (topic, stripe, scheduled, ready, ver)
      VALUES (p_topic, UUID_SHORT() & 4611686018427387903, v_sched, v_ready, 1)
      ON DUPLICATE KEY UPDATE scheduled = scheduled + VALUES(scheduled), ready = ready + VALUES(ready), ver = ver + 1;
  END IF;
  SET v_done = 0;
  SELECT deleted INTO v_deleted FROM {{p}}topic WHERE name = p_topic;
  IF v_deleted IS NULL THEN
    INSERT IGNORE INTO {{p}}topic (name) VALUES (p_topic);
  ELSEIF v_deleted = 1 THEN
    UPDATE {{p}}topic SET deleted = 0 WHERE name = p_topic AND deleted = 1;
  END IF;
END
