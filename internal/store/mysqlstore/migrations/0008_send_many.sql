-- {{p}}send_many: a batch of messages to one topic in one CALL, inside the
-- application's transaction, for any language. Sending a batch through
-- {{p}}send costs two round trips per message (the CALL and the SELECT of
-- its OUT variables), four statements and a count row each; this is one
-- CALL and one SELECT for the batch, a handful of set-based statements,
-- and one count row.
--
-- p_messages is a JSON array of objects, in send order:
--   {"id": "order-43", "payload": "<base64>", "delay_ms": 1800000,
--    "max_attempts": 0, "priority": 0}
-- Every field may be left out: id (or null) generates a UUID, payload
-- (base64, so any bytes) defaults to empty, delay_ms to 0 (due now),
-- max_attempts to 25, priority to 0. o_results is a JSON array with one
-- [id, duplicate (0/1), due (Unix ms)] per message, in the same order.
--
-- The elements are checked by one query and staged by one insert in a
-- temporary table of the session ({{p}}send_batch; no locks, no redo), then sent together:
-- the same duplicate checks as {{p}}send_priority's, which lock nothing
-- that does not exist (a consistent read of the tombstones, and the
-- message insert's own key check). An id that repeats within the batch is
-- a duplicate of its first occurrence. Should the insert find an id
-- already a message (or a concurrent send of it), the batch is sent one
-- message at a time instead, as {{p}}send_priority would. A malformed
-- element fails the whole call naming its position, before anything is
-- written.
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
  DECLARE v_dup TINYINT;
  DECLARE v_taken TINYINT DEFAULT 0;
  DECLARE v_sched BIGINT DEFAULT 0;
  DECLARE v_ready BIGINT DEFAULT 0;
  DECLARE v_deleted TINYINT DEFAULT NULL;
  DECLARE v_concat_max BIGINT UNSIGNED DEFAULT @@SESSION.group_concat_max_len;
  DECLARE v_msg VARCHAR(255);
  DECLARE v_first INT;
  -- A cursor's query is a consistent read, like {{p}}send_priority's
  -- SELECT … INTO: it locks nothing, at REPEATABLE READ too, where a
  -- statement that writes (an UPDATE joined to the tombstones) would lock
  -- what it reads, gaps included.
  DECLARE c_acked CURSOR FOR
    SELECT b.pos, t.due FROM {{p}}send_batch b JOIN {{p}}tombstone t ON t.topic = p_topic AND t.id = b.id
     WHERE b.dup = 0;
  DECLARE c_repeated CURSOR FOR
    SELECT b.id, MIN(b.pos) FROM {{p}}send_batch b GROUP BY b.id HAVING COUNT(*) > 1;
  DECLARE c_repeats CURSOR FOR
    SELECT b.pos, b.first_pos FROM {{p}}send_batch b WHERE b.dup = 2;
  DECLARE c_one_by_one CURSOR FOR
    SELECT b.pos, b.id, b.payload, b.due, b.max_attempts, b.priority
      FROM {{p}}send_batch b WHERE b.dup = 0 ORDER BY b.pos;
  DECLARE CONTINUE HANDLER FOR 1062 SET v_taken = 1;
  -- Both a cursor's end and a SELECT … INTO that found nothing: v_done
  -- is reset before each FETCH and read right after it.
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
  IF p_topic IS NULL OR p_topic = '' THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'delayq_send_many: topic is required';
  END IF;
  IF p_messages IS NULL OR JSON_VALID(p_messages) = 0 OR JSON_TYPE(p_messages) <> 'ARRAY' THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'delayq_send_many: messages must be a JSON array of objects';
  END IF;
  -- dup: 0 to send, 1 already a message or acked, 2 a repeat within the
  -- batch (answered from its first occurrence once that is sent).
  CREATE TEMPORARY TABLE IF NOT EXISTS {{p}}send_batch (
    pos INT NOT NULL PRIMARY KEY,
    id VARBINARY(255) NOT NULL,
    payload LONGBLOB NOT NULL,
    due BIGINT NOT NULL,
    max_attempts INT NOT NULL,
    priority TINYINT UNSIGNED NOT NULL,
    dup TINYINT NOT NULL DEFAULT 0,
    first_pos INT,
    seq BIGINT UNSIGNED,
    KEY (id)
  ) ENGINE=InnoDB;
  DELETE FROM {{p}}send_batch;

  -- The first element that is not as documented, if any: found by one
  -- query, then checked field by field for an error that names what is
  -- wrong.
  SELECT MIN(j.pos) INTO v_pos
    FROM JSON_TABLE(p_messages, '$[*]' COLUMNS (pos FOR ORDINALITY, elem JSON PATH '$',
           idj JSON PATH '$.id', payj JSON PATH '$.payload', delayj JSON PATH '$.delay_ms',
           maxj JSON PATH '$.max_attempts', prioj JSON PATH '$.priority')) j
   WHERE COALESCE(
           JSON_TYPE(j.elem) = 'OBJECT'
           AND (j.idj IS NULL OR JSON_TYPE(j.idj) = 'NULL'
                OR (JSON_TYPE(j.idj) = 'STRING' AND JSON_UNQUOTE(j.idj) <> '' AND LENGTH(JSON_UNQUOTE(j.idj)) <= 255))
           AND (j.payj IS NULL OR JSON_TYPE(j.payj) = 'NULL'
                OR (JSON_TYPE(j.payj) = 'STRING' AND JSON_UNQUOTE(j.payj) REGEXP '^[A-Za-z0-9+/]*={0,2}$'
                    AND LENGTH(JSON_UNQUOTE(j.payj)) % 4 = 0))
           AND (j.delayj IS NULL OR JSON_TYPE(j.delayj) IN ('NULL', 'INTEGER'))
           AND (j.maxj IS NULL OR JSON_TYPE(j.maxj) = 'NULL'
                OR (JSON_TYPE(j.maxj) = 'INTEGER' AND CAST(j.maxj AS SIGNED) <= 2147483647))
           AND (j.prioj IS NULL OR JSON_TYPE(j.prioj) = 'NULL'
                OR (JSON_TYPE(j.prioj) = 'INTEGER' AND CAST(j.prioj AS SIGNED) BETWEEN 0 AND 255)),
           FALSE) = FALSE;
  IF v_pos IS NOT NULL THEN
    SET v_elem = JSON_EXTRACT(p_messages, CONCAT('$[', v_pos - 1, ']'));
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
      IF v_payload IS NULL OR NOT (JSON_UNQUOTE(v_field) REGEXP '^[A-Za-z0-9+/]*={0,2}$' AND LENGTH(JSON_UNQUOTE(v_field)) % 4 = 0) THEN
        SET v_msg = CONCAT('delayq_send_many: message ', v_pos - 1, ': payload is not base64 (standard alphabet, padded, no line breaks)');
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
    SET v_msg = CONCAT('delayq_send_many: message ', v_pos - 1, ' is not as documented');
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
  END IF;

  -- Valid: staged together, a UUID for each message without an id.
  INSERT INTO {{p}}send_batch (pos, id, payload, due, max_attempts, priority)
    SELECT j.pos, COALESCE(CONVERT(j.id USING binary), CAST(UUID() AS CHAR)), COALESCE(FROM_BASE64(j.payload), ''),
           v_now + GREATEST(COALESCE(j.delay_ms, 0), 0), IF(COALESCE(j.max_attempts, 0) <= 0, 25, j.max_attempts),
           COALESCE(j.priority, 0)
      FROM JSON_TABLE(p_messages, '$[*]' COLUMNS (pos FOR ORDINALITY,
             id VARCHAR(255) CHARACTER SET utf8mb4 PATH '$.id', payload LONGTEXT CHARACTER SET utf8mb4 PATH '$.payload',
             delay_ms BIGINT PATH '$.delay_ms', max_attempts INT PATH '$.max_attempts', priority INT PATH '$.priority')) j;
  -- Ids repeated within the batch (rare): each later occurrence answers
  -- its first one.
  OPEN c_repeated;
  repeated_loop: LOOP
    SET v_done = 0;
    FETCH c_repeated INTO v_id, v_first;
    IF v_done = 1 THEN
      LEAVE repeated_loop;
    END IF;
    UPDATE {{p}}send_batch SET dup = 2, first_pos = v_first WHERE id = v_id AND pos > v_first;
  END LOOP;
  CLOSE c_repeated;

  -- Acked within the dedup window: a duplicate, answered the acked
  -- message's due time (a consistent read, as {{p}}send_priority's).
  OPEN c_acked;
  acked_loop: LOOP
    SET v_done = 0;
    FETCH c_acked INTO v_pos, v_due;
    IF v_done = 1 THEN
      LEAVE acked_loop;
    END IF;
    UPDATE {{p}}send_batch SET dup = 1, due = v_due WHERE pos = v_pos;
  END LOOP;
  CLOSE c_acked;
  SET v_taken = 0;
  INSERT INTO {{p}}message (topic, id, state, payload, headers, due, created, updated, max_attempts, priority)
    SELECT p_topic, b.id, IF(b.due <= v_now, 2, 1), b.payload, NULL, b.due, v_now, v_now, b.max_attempts, b.priority
      FROM {{p}}send_batch b WHERE b.dup = 0 ORDER BY b.pos;
  IF v_taken = 0 THEN
    -- The statement's rows, numbered in batch order.
    UPDATE {{p}}send_batch b
       SET b.seq = (SELECT m.seq FROM {{p}}message m WHERE m.topic = p_topic AND m.id = b.id)
     WHERE b.dup = 0;
  ELSE
    -- An id is already a message (the failed statement inserted
    -- nothing): one at a time, each duplicate found by its own insert.
    OPEN c_one_by_one;
    send_loop: LOOP
      SET v_done = 0;
      FETCH c_one_by_one INTO v_pos, v_id, v_payload, v_due, v_max, v_priority;
      IF v_done = 1 THEN
        LEAVE send_loop;
      END IF;
      SET v_taken = 0;
      INSERT INTO {{p}}message (topic, id, state, payload, headers, due, created, updated, max_attempts, priority)
        VALUES (p_topic, v_id, IF(v_due <= v_now, 2, 1), v_payload, NULL, v_due, v_now, v_now, v_max, v_priority);
      IF v_taken = 0 THEN
        UPDATE {{p}}send_batch SET seq = LAST_INSERT_ID() WHERE pos = v_pos;
      ELSE
        SET v_due = NULL;
        SELECT due INTO v_due FROM {{p}}message WHERE topic = p_topic AND id = v_id LOCK IN SHARE MODE;
        IF v_due IS NULL THEN -- acked since the insert's check
          SELECT due INTO v_due FROM {{p}}tombstone WHERE topic = p_topic AND id = v_id;
        END IF;
        UPDATE {{p}}send_batch SET dup = 1, due = v_due WHERE pos = v_pos;
      END IF;
    END LOOP;
    CLOSE c_one_by_one;
  END IF;
  INSERT INTO {{p}}q_scheduled (topic, due, seq, id)
    SELECT p_topic, b.due, b.seq, b.id FROM {{p}}send_batch b WHERE b.dup = 0 AND b.due > v_now;
  SET v_sched = ROW_COUNT();
  INSERT INTO {{p}}q_ready (topic, due, seq, id, priority)
    SELECT p_topic, b.due, b.seq, b.id, b.priority FROM {{p}}send_batch b WHERE b.dup = 0 AND b.due <= v_now;
  SET v_ready = ROW_COUNT();
  -- A repeat answers its first occurrence's due time.
  OPEN c_repeats;
  repeats_loop: LOOP
    SET v_done = 0;
    FETCH c_repeats INTO v_pos, v_first;
    IF v_done = 1 THEN
      LEAVE repeats_loop;
    END IF;
    SELECT due INTO v_due FROM {{p}}send_batch WHERE pos = v_first;
    UPDATE {{p}}send_batch SET due = v_due WHERE pos = v_pos;
  END LOOP;
  CLOSE c_repeats;

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

  -- JSON_ARRAYAGG is bounded by group_concat_max_len: raised for this
  -- statement only, then given back to the application's session.
  SET SESSION group_concat_max_len = 1073741824;
  SELECT COALESCE(JSON_ARRAYAGG(JSON_ARRAY(CONVERT(b.id USING utf8mb4), CAST(b.dup <> 0 AS SIGNED), CAST(b.due AS SIGNED)) ORDER BY b.pos), '[]')
    INTO o_results FROM {{p}}send_batch b;
  SET SESSION group_concat_max_len = v_concat_max;
  DELETE FROM {{p}}send_batch;
END
