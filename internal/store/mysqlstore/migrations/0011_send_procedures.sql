-- {{p}}send_many (version 8) with the same arguments, answers, duplicates
-- and errors, at about 40 % less of the database's CPU per message (200
-- CALLs of 100 messages from one client, each in a transaction of its
-- own: bench/mysql/calls.sh, 69–79 → 37–45 µs):
--   - the JSON is read once: the staging insert also works out whether
--     each element is as documented, where a JSON_TABLE scan of its own
--     checked them first. Nothing in that insert can fail on a bad
--     element (see the columns' comment), and the first bad one is then
--     checked field by field for the same errors as before. A
--     max_attempts too large for BIGINT is now refused by name (version 8
--     took it as 2^31 - 1);
--   - a JSON value's type is read from its first character where that
--     tells it (string, null), JSON_TYPE only for numbers; an element is
--     read whole (to tell an object from anything else) only when it has
--     none of the fields;
--   - the seqs of a batch without duplicates are numbered from
--     LAST_INSERT_ID() in steps of @@auto_increment_increment, not read
--     back row by row: a multi-row INSERT … SELECT takes consecutive
--     values under innodb_autoinc_lock_mode 0 and 1 (MariaDB's default).
--     Whether it did is checked on the batch's last row; where it did not
--     (lock mode 2, as under Galera) they are read back as before;
--   - an id repeated within the batch is found by the message insert's
--     key check (the batch is then sent one message at a time, as for an
--     id already a message, and the repeat answers its first occurrence),
--     where a GROUP BY over the staged ids looked for repeats in every
--     batch;
--   - the answer is built with GROUP_CONCAT rather than JSON_ARRAYAGG of
--     JSON_ARRAYs (the same JSON without spaces), in a work table in
--     memory rather than on disk (two files made and removed per CALL),
--     and a queue insert with nothing to insert is not run.
--   - the tombstones are read after the insert, not before, and a
--     message whose id has one is taken back: at READ COMMITTED this also
--     finds an ack that committed while the insert waited for its lock on
--     the old message row, which sent the id again (TestSendRacesAck).
-- The staging table has a new name ({{p}}send_staged): a session still
-- holding version 8's {{p}}send_batch keeps it, with its other columns.
-- {{p}}send and {{p}}send_priority (version 10's, below) read the
-- tombstone after their insert too, for the same reason (a generated id
-- is new and not looked up). All three are replaced with CREATE OR
-- REPLACE, which keeps the EXECUTE grants applications hold on them.
CREATE OR REPLACE PROCEDURE {{p}}send_many(
  IN p_topic VARBINARY(255), IN p_messages LONGTEXT CHARACTER SET utf8mb4,
  OUT o_results LONGTEXT CHARACTER SET utf8mb4)
MODIFIES SQL DATA
BEGIN
  DECLARE v_now BIGINT DEFAULT CAST(FLOOR(UNIX_TIMESTAMP(NOW(3)) * 1000) AS SIGNED);
  DECLARE v_done TINYINT DEFAULT 0;
  DECLARE v_pos INT;
  DECLARE v_bare TINYINT;
  DECLARE v_id_max INT;
  DECLARE v_elem LONGTEXT CHARACTER SET utf8mb4;
  DECLARE v_field LONGTEXT CHARACTER SET utf8mb4;
  DECLARE v_id_text LONGTEXT CHARACTER SET utf8mb4;
  DECLARE v_delay BIGINT;
  DECLARE v_max INT;
  DECLARE v_priority INT;
  DECLARE v_id VARBINARY(255);
  DECLARE v_payload LONGBLOB;
  DECLARE v_due BIGINT;
  DECLARE v_taken TINYINT DEFAULT 0;
  DECLARE v_sent BIGINT DEFAULT 0;
  DECLARE v_sched BIGINT DEFAULT 0;
  DECLARE v_ready BIGINT DEFAULT 0;
  DECLARE v_acked BIGINT DEFAULT 0;
  DECLARE v_seq0 BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_seq_step BIGINT UNSIGNED DEFAULT @@SESSION.auto_increment_increment;
  DECLARE v_last_pos INT;
  DECLARE v_last_id VARBINARY(255);
  DECLARE v_last_seq BIGINT UNSIGNED;
  DECLARE v_deleted TINYINT DEFAULT NULL;
  DECLARE v_concat_max BIGINT UNSIGNED DEFAULT @@SESSION.group_concat_max_len;
  DECLARE v_msg VARCHAR(255);
  -- A cursor's query is a consistent read, like {{p}}send_priority's
  -- SELECT … INTO: it locks nothing, at REPEATABLE READ too, where a
  -- statement that writes (an UPDATE joined to the tombstones) would lock
  -- what it reads, gaps included.
  DECLARE c_acked CURSOR FOR
    SELECT b.pos, b.id, t.due FROM {{p}}send_staged b JOIN {{p}}tombstone t ON t.topic = p_topic AND t.id = b.id
     WHERE b.dup = 0;
  DECLARE c_one_by_one CURSOR FOR
    SELECT b.pos, b.id, b.payload, b.due, b.max_attempts, b.priority
      FROM {{p}}send_staged b WHERE b.dup = 0 ORDER BY b.pos;
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
  -- Emptied at the start of each call and at its end. Not dropped and
  -- made afresh, which would cost less than deleting a batch's rows but
  -- has MariaDB parse the procedure again at every CALL. dup: 0 to
  -- send, 1 a duplicate (already a message, acked, or a repeat within
  -- the batch). bare: the element has none of the fields. bad: a field
  -- is not as documented; payload is NULL when it is not base64.
  CREATE TEMPORARY TABLE IF NOT EXISTS {{p}}send_staged (
    pos INT NOT NULL PRIMARY KEY,
    bare TINYINT NOT NULL,
    bad TINYINT NOT NULL,
    id VARBINARY(255) NOT NULL,
    payload LONGBLOB,
    due BIGINT NOT NULL,
    max_attempts INT NOT NULL,
    priority TINYINT UNSIGNED NOT NULL,
    dup TINYINT NOT NULL DEFAULT 0,
    seq BIGINT UNSIGNED
  ) ENGINE=InnoDB;
  DELETE FROM {{p}}send_staged;

  -- Staged in one read of the JSON, a UUID for each message without an
  -- id, with bad set for an element a field of which is not as
  -- documented.
  INSERT INTO {{p}}send_staged (pos, bare, bad, id, payload, due, max_attempts, priority)
    SELECT j.pos,
           j.idj IS NULL AND j.payj IS NULL AND j.delayj IS NULL AND j.maxj IS NULL AND j.prioj IS NULL,
           -- A JSON value's type by its first character where that is
           -- enough (n: null, ": a string), JSON_TYPE for numbers.
           NOT COALESCE(
             (j.idj IS NULL OR LEFT(j.idj, 1) = 'n' OR (LEFT(j.idj, 1) = '"' AND LENGTH(j.id) BETWEEN 1 AND 255))
             AND (j.payj IS NULL OR LEFT(j.payj, 1) IN ('n', '"'))
             AND (j.delayj IS NULL OR LEFT(j.delayj, 1) = 'n' OR JSON_TYPE(j.delayj) = 'INTEGER')
             AND (j.maxj IS NULL OR LEFT(j.maxj, 1) = 'n' OR (JSON_TYPE(j.maxj) = 'INTEGER' AND j.max_attempts <= 2147483647))
             AND (j.prioj IS NULL OR LEFT(j.prioj, 1) = 'n' OR (JSON_TYPE(j.prioj) = 'INTEGER' AND j.priority BETWEEN 0 AND 255)),
             FALSE),
           IF(LEFT(j.idj, 1) = '"' AND LENGTH(j.id) BETWEEN 1 AND 255, CONVERT(j.id USING binary), CAST(UUID() AS CHAR)),
           -- Base64 as documented (standard alphabet, padded, no line
           -- breaks) decodes; a string that is not stays NULL (bad).
           CASE WHEN j.payj IS NULL OR LEFT(j.payj, 1) <> '"' THEN ''
                WHEN j.payload REGEXP '^[A-Za-z0-9+/]*={0,2}$' AND LENGTH(j.payload) % 4 = 0 THEN FROM_BASE64(j.payload) END,
           v_now + IF(JSON_TYPE(j.delayj) = 'INTEGER', GREATEST(j.delay_ms, 0), 0),
           IF(j.max_attempts BETWEEN 1 AND 2147483647, j.max_attempts, 25),
           IF(j.priority BETWEEN 0 AND 255, j.priority, 0)
      -- Each field is read twice: as JSON text, for its type, and as a
      -- typed column, for its value. The typed columns convert without
      -- failing (a number out of range is clamped, text that is not one
      -- is 0, with a warning), where CAST in an INSERT fails; an id of
      -- more than 255 bytes is cut at 256 characters, still too long.
      FROM JSON_TABLE(p_messages, '$[*]' COLUMNS (pos FOR ORDINALITY,
             idj JSON PATH '$.id', id VARCHAR(256) CHARACTER SET utf8mb4 PATH '$.id',
             payj JSON PATH '$.payload', payload LONGTEXT CHARACTER SET utf8mb4 PATH '$.payload',
             delayj JSON PATH '$.delay_ms', delay_ms BIGINT PATH '$.delay_ms',
             maxj JSON PATH '$.max_attempts', max_attempts BIGINT PATH '$.max_attempts',
             prioj JSON PATH '$.priority', priority BIGINT PATH '$.priority')) j;
  -- The first element that is not as documented, if any, checked field by
  -- field for an error that names what is wrong. An element with none of
  -- the fields may not be an object at all (a field's path finds nothing
  -- in a number or an array): only then are the elements' types read, in
  -- a second scan (reading each element whole costs a third of the
  -- staging's time).
  SET v_pos = NULL;
  SELECT MIN(IF(b.bad = 1 OR b.payload IS NULL, b.pos, NULL)), MAX(b.bare), MAX(LENGTH(b.id))
    INTO v_pos, v_bare, v_id_max FROM {{p}}send_staged b;
  IF v_bare = 1 THEN
    SELECT LEAST(COALESCE(MIN(j.pos), v_pos), COALESCE(v_pos, MIN(j.pos))) INTO v_pos
      FROM JSON_TABLE(p_messages, '$[*]' COLUMNS (pos FOR ORDINALITY, elem JSON PATH '$')) j
     WHERE COALESCE(JSON_TYPE(j.elem), '') <> 'OBJECT';
  END IF;
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
      IF JSON_TYPE(v_field) <> 'INTEGER' OR CAST(v_field AS DECIMAL(65, 0)) > 2147483647 THEN
        SET v_msg = CONCAT('delayq_send_many: message ', v_pos - 1, ': max_attempts must be an integer below 2^31');
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
      END IF;
      SET v_max = GREATEST(CAST(v_field AS SIGNED), 0);
    END IF;
    SET v_priority = 0;
    SET v_field = JSON_EXTRACT(v_elem, '$.priority');
    IF v_field IS NOT NULL AND JSON_TYPE(v_field) <> 'NULL' THEN
      IF JSON_TYPE(v_field) <> 'INTEGER' OR CAST(v_field AS DECIMAL(65, 0)) NOT BETWEEN 0 AND 255 THEN
        SET v_msg = CONCAT('delayq_send_many: message ', v_pos - 1, ': priority must be 0 to 255');
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
      END IF;
      SET v_priority = CAST(v_field AS SIGNED);
    END IF;
    SET v_msg = CONCAT('delayq_send_many: message ', v_pos - 1, ' is not as documented');
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
  END IF;


  SET v_taken = 0;
  INSERT INTO {{p}}message (topic, id, state, payload, headers, due, created, updated, max_attempts, priority)
    SELECT p_topic, b.id, IF(b.due <= v_now, 2, 1), b.payload, NULL, b.due, v_now, v_now, b.max_attempts, b.priority
      FROM {{p}}send_staged b WHERE b.dup = 0 ORDER BY b.pos;
  IF v_taken = 0 THEN
    SET v_sent = ROW_COUNT();
    -- Acked within the dedup window: a duplicate, answered the acked
    -- message's due time, its message taken back. The tombstones are read
    -- after the insert (a consistent read, as {{p}}send_priority's): at
    -- READ COMMITTED that also finds an ack that committed while the
    -- insert waited for it.
    OPEN c_acked;
    acked_loop: LOOP
      SET v_done = 0;
      FETCH c_acked INTO v_pos, v_id, v_due;
      IF v_done = 1 THEN
        LEAVE acked_loop;
      END IF;
      DELETE FROM {{p}}message WHERE topic = p_topic AND id = v_id;
      UPDATE {{p}}send_staged SET dup = 1, due = v_due WHERE pos = v_pos;
      SET v_acked = v_acked + 1;
    END LOOP;
    CLOSE c_acked;
    SET v_sent = v_sent - v_acked;
    IF v_sent > 0 THEN
      -- Every element was inserted, the k-th (pos k) with seq
      -- LAST_INSERT_ID() + (k - 1) steps if the values were consecutive:
      -- then the last one has exactly that seq (values only grow; if it
      -- was taken back, the seqs are read back).
      SET v_seq0 = LAST_INSERT_ID();
      SELECT b.pos, b.id INTO v_last_pos, v_last_id FROM {{p}}send_staged b ORDER BY b.pos DESC LIMIT 1;
      SET v_last_seq = NULL;
      SELECT m.seq INTO v_last_seq FROM {{p}}message m WHERE m.topic = p_topic AND m.id = v_last_id;
      IF v_last_seq IS NULL OR v_last_seq <> v_seq0 + (v_last_pos - 1) * v_seq_step THEN
        SET v_seq0 = NULL;
      END IF;
    END IF;
    IF v_seq0 IS NULL THEN
      -- The statement's rows, read back.
      UPDATE {{p}}send_staged b
         SET b.seq = (SELECT m.seq FROM {{p}}message m WHERE m.topic = p_topic AND m.id = b.id)
       WHERE b.dup = 0;
    END IF;
  ELSE
    -- An id is already a message, or repeats within the batch (the
    -- failed statement inserted nothing): one at a time, each duplicate
    -- found by its own insert, a repeat answering its first occurrence.
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
        SET v_last_seq = LAST_INSERT_ID();
        SET v_due = NULL; -- the tombstone's, read after the insert as above
        SELECT t.due INTO v_due FROM {{p}}tombstone t WHERE t.topic = p_topic AND t.id = v_id;
        IF v_due IS NULL THEN
          UPDATE {{p}}send_staged SET seq = v_last_seq WHERE pos = v_pos;
          SET v_sent = v_sent + 1;
        ELSE
          DELETE FROM {{p}}message WHERE topic = p_topic AND id = v_id;
          UPDATE {{p}}send_staged SET dup = 1, due = v_due WHERE pos = v_pos;
        END IF;
      ELSE
        SET v_due = NULL;
        SELECT due INTO v_due FROM {{p}}message WHERE topic = p_topic AND id = v_id LOCK IN SHARE MODE;
        IF v_due IS NULL THEN -- acked since the insert's check
          SELECT due INTO v_due FROM {{p}}tombstone WHERE topic = p_topic AND id = v_id;
        END IF;
        UPDATE {{p}}send_staged SET dup = 1, due = v_due WHERE pos = v_pos;
      END IF;
    END LOOP;
    CLOSE c_one_by_one;
  END IF;
  IF v_sent > 0 THEN
    INSERT INTO {{p}}q_scheduled (topic, due, seq, id)
      SELECT p_topic, b.due, COALESCE(v_seq0 + (b.pos - 1) * v_seq_step, b.seq), b.id
        FROM {{p}}send_staged b WHERE b.dup = 0 AND b.due > v_now;
    SET v_sched = ROW_COUNT();
  END IF;
  IF v_sched < v_sent THEN
    INSERT INTO {{p}}q_ready (topic, due, seq, id, priority)
      SELECT p_topic, b.due, COALESCE(v_seq0 + (b.pos - 1) * v_seq_step, b.seq), b.id, b.priority
        FROM {{p}}send_staged b WHERE b.dup = 0 AND b.due <= v_now;
    SET v_ready = ROW_COUNT();
  END IF;
  -- One count row for the batch, as {{p}}send makes one per message.
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

  -- The answer, built with GROUP_CONCAT (a fifth cheaper than
  -- JSON_ARRAYAGG of JSON_ARRAYs), which is bounded by
  -- group_concat_max_len: raised for this statement only, then given back
  -- to the application's session. Its work table stays in memory only if
  -- each quoted id is typed at most 512 characters, which an id of up to
  -- 85 bytes is however it is escaped (\u00XX for each byte, and the
  -- quotes); a longer one, rare, makes that table on disk (two files made
  -- and removed, about a tenth of a batch's time).
  SET SESSION group_concat_max_len = 1073741824;
  IF v_id_max <= 85 THEN
    SELECT CONCAT('[', COALESCE(GROUP_CONCAT('[', CAST(JSON_QUOTE(CONVERT(b.id USING utf8mb4)) AS CHAR(512)), ',', b.dup, ',', b.due, ']' ORDER BY b.pos SEPARATOR ','), ''), ']')
      INTO o_results FROM {{p}}send_staged b;
  ELSE
    SELECT CONCAT('[', COALESCE(GROUP_CONCAT('[', JSON_QUOTE(CONVERT(b.id USING utf8mb4)), ',', b.dup, ',', b.due, ']' ORDER BY b.pos SEPARATOR ','), ''), ']')
      INTO o_results FROM {{p}}send_staged b;
  END IF;
  SET SESSION group_concat_max_len = v_concat_max;
  DELETE FROM {{p}}send_staged;
END
--;
CREATE OR REPLACE PROCEDURE {{p}}send(
  IN p_topic VARBINARY(255), IN p_id VARBINARY(255), IN p_payload LONGBLOB,
  IN p_delay_ms BIGINT, IN p_max_attempts INT,
  OUT o_id VARBINARY(255), OUT o_duplicate TINYINT, OUT o_due BIGINT)
MODIFIES SQL DATA
BEGIN
  DECLARE p_priority INT DEFAULT 0; -- send has no priority argument: send_priority's 0
  DECLARE v_now BIGINT DEFAULT CAST(FLOOR(UNIX_TIMESTAMP(NOW(3)) * 1000) AS SIGNED);
  DECLARE v_due BIGINT;
  DECLARE v_state TINYINT;
  DECLARE v_seq BIGINT UNSIGNED;
  DECLARE v_taken TINYINT DEFAULT 0;
  DECLARE v_deleted TINYINT DEFAULT NULL;
  DECLARE v_tomb_due BIGINT DEFAULT NULL;
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
  -- Duplicate checks that lock nothing that does not exist: a message
  -- with this id is found by the insert's own key check, which waits for
  -- a concurrent send (or ack) of the same id and then fails if it
  -- committed a row; the tombstone is read after the insert, consistently.
  BEGIN
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
      -- Acked within the dedup window: read after the insert, so that at
      -- READ COMMITTED an ack that committed while the insert waited for
      -- it is seen; the message is taken back. (A generated id is new.)
      SET v_tomb_due = NULL;
      IF p_id IS NOT NULL THEN
        SELECT due INTO v_tomb_due FROM {{p}}tombstone WHERE topic = p_topic AND id = o_id;
      END IF;
    END IF;
    IF v_taken = 0 AND v_tomb_due IS NOT NULL THEN
      DELETE FROM {{p}}message WHERE topic = p_topic AND id = o_id;
      SET o_duplicate = 1;
      SET o_due = v_tomb_due;
    ELSEIF v_taken = 0 THEN
      IF v_state = 1 THEN
        INSERT INTO {{p}}q_scheduled (topic, due, seq, id) VALUES (p_topic, v_due, v_seq, o_id);
      ELSE
        INSERT INTO {{p}}q_ready (topic, due, seq, id, priority) VALUES (p_topic, v_due, v_seq, o_id, p_priority);
      END IF;
      -- The send's count row and the topic row, as count_send does them
      -- (schema version 7), inlined: a nested CALL cost about as much as
      -- the insert.
      INSERT INTO {{p}}topic_count (topic, stripe, scheduled, ready, ver)
        VALUES (p_topic, UUID_SHORT() & 4611686018427387903, v_state = 1, v_state = 2, 1)
        ON DUPLICATE KEY UPDATE scheduled = scheduled + VALUES(scheduled), ready = ready + VALUES(ready), ver = ver + 1;
      SELECT deleted INTO v_deleted FROM {{p}}topic WHERE name = p_topic;
      IF v_deleted IS NULL THEN
        INSERT IGNORE INTO {{p}}topic (name) VALUES (p_topic);
      ELSEIF v_deleted = 1 THEN
        UPDATE {{p}}topic SET deleted = 0 WHERE name = p_topic AND deleted = 1;
      END IF;
      SET o_due = v_due;
    END IF;
  END;
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
  DECLARE v_deleted TINYINT DEFAULT NULL;
  DECLARE v_tomb_due BIGINT DEFAULT NULL;
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
  -- Duplicate checks that lock nothing that does not exist: a message
  -- with this id is found by the insert's own key check, which waits for
  -- a concurrent send (or ack) of the same id and then fails if it
  -- committed a row; the tombstone is read after the insert, consistently.
  BEGIN
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
      -- Acked within the dedup window: read after the insert, so that at
      -- READ COMMITTED an ack that committed while the insert waited for
      -- it is seen; the message is taken back. (A generated id is new.)
      SET v_tomb_due = NULL;
      IF p_id IS NOT NULL THEN
        SELECT due INTO v_tomb_due FROM {{p}}tombstone WHERE topic = p_topic AND id = o_id;
      END IF;
    END IF;
    IF v_taken = 0 AND v_tomb_due IS NOT NULL THEN
      DELETE FROM {{p}}message WHERE topic = p_topic AND id = o_id;
      SET o_duplicate = 1;
      SET o_due = v_tomb_due;
    ELSEIF v_taken = 0 THEN
      IF v_state = 1 THEN
        INSERT INTO {{p}}q_scheduled (topic, due, seq, id) VALUES (p_topic, v_due, v_seq, o_id);
      ELSE
        INSERT INTO {{p}}q_ready (topic, due, seq, id, priority) VALUES (p_topic, v_due, v_seq, o_id, p_priority);
      END IF;
      -- The send's count row and the topic row, as count_send does them
      -- (schema version 7), inlined: a nested CALL cost about as much as
      -- the insert.
      INSERT INTO {{p}}topic_count (topic, stripe, scheduled, ready, ver)
        VALUES (p_topic, UUID_SHORT() & 4611686018427387903, v_state = 1, v_state = 2, 1)
        ON DUPLICATE KEY UPDATE scheduled = scheduled + VALUES(scheduled), ready = ready + VALUES(ready), ver = ver + 1;
      SELECT deleted INTO v_deleted FROM {{p}}topic WHERE name = p_topic;
      IF v_deleted IS NULL THEN
        INSERT IGNORE INTO {{p}}topic (name) VALUES (p_topic);
      ELSEIF v_deleted = 1 THEN
        UPDATE {{p}}topic SET deleted = 0 WHERE name = p_topic AND deleted = 1;
      END IF;
      SET o_due = v_due;
    END IF;
  END;
END
