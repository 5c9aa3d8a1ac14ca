-- {{p}}send sends one message from SQL inside the caller's transaction:
-- the message exists if and only if that transaction commits. Servers
-- see it within their poll interval of the commit (the topic's ver is
-- bumped in the same transaction). Any MySQL client can call it:
--
--   CALL delayq_send('orders', 'order-42', '{"n":1}', 5000, 0, @id, @dup, @due);
--   SELECT @id, @dup, @due;
--
-- p_id NULL: a UUID is generated. p_delay_ms <= 0 or NULL: due at once.
-- p_max_attempts NULL or 0: 25. Out: the id, 1 when the topic already held
-- it (nothing sent), and the message's due time (Unix ms, the database's
-- clock). Headers are not supported here (send them through the server).
DROP PROCEDURE IF EXISTS {{p}}send
--;
CREATE PROCEDURE {{p}}send(
  IN p_topic VARBINARY(255), IN p_id VARBINARY(255), IN p_payload LONGBLOB,
  IN p_delay_ms BIGINT, IN p_max_attempts INT,
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
    INSERT INTO {{p}}message (topic, id, state, payload, headers, due, created, updated, max_attempts)
      VALUES (p_topic, o_id, v_state, COALESCE(p_payload, ''), NULL, v_due, v_now, v_now, IF(COALESCE(p_max_attempts, 0) <= 0, 25, p_max_attempts));
    SET v_seq = LAST_INSERT_ID();
    IF v_state = 1 THEN
      INSERT INTO {{p}}q_scheduled (topic, due, seq, id) VALUES (p_topic, v_due, v_seq, o_id);
    ELSE
      INSERT INTO {{p}}q_ready (topic, due, seq, id) VALUES (p_topic, v_due, v_seq, o_id);
    END IF;
    INSERT INTO {{p}}topic (name, scheduled, ready, ver) VALUES (p_topic, v_state = 1, v_state = 2, 1)
      ON DUPLICATE KEY UPDATE scheduled = scheduled + VALUES(scheduled), ready = ready + VALUES(ready), ver = ver + 1;
    SET o_due = v_due;
  END IF;
END
