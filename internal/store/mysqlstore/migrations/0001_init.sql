-- delayq MySQL/MariaDB schema, version 1. {{p}} is the table prefix.
-- Statements are separated by lines holding only "--;" (DDL is not
-- transactional in MySQL: each statement is applied and the version row
-- is written after the last one; every statement is idempotent).
--
-- Why this shape (InnoDB): a message's row in {{p}}message is written once
-- and then updated in place for its whole life (scheduled, ready,
-- inflight, dead); the per-state queues are narrow tables whose primary
-- key is the order they are read in, so promotion and leasing read a
-- clustered range and lock only the rows they take (SKIP LOCKED).
-- Acked tombstones move to {{p}}tombstone and are purged in batches by
-- acked_at, so the big message table sees no delete churn from acks.

CREATE TABLE IF NOT EXISTS {{p}}message (
  topic        VARBINARY(255) NOT NULL,
  id           VARBINARY(255) NOT NULL,
  seq          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  state        TINYINT NOT NULL,
  payload      LONGBLOB,
  headers      BLOB,
  due          BIGINT NOT NULL,
  created      BIGINT NOT NULL,
  updated      BIGINT NOT NULL,
  deliveries   INT NOT NULL DEFAULT 0,
  failures     INT NOT NULL DEFAULT 0,
  max_attempts INT NOT NULL,
  last_error   TEXT,
  receipt      VARBINARY(255),
  lease_until  BIGINT NOT NULL DEFAULT 0,
  dead_at      BIGINT NOT NULL DEFAULT 0,
  PRIMARY KEY (topic, id),
  UNIQUE KEY seq (seq)
) ENGINE=InnoDB ROW_FORMAT=DYNAMIC
--;
CREATE TABLE IF NOT EXISTS {{p}}q_scheduled (
  topic VARBINARY(255) NOT NULL, due BIGINT NOT NULL, seq BIGINT UNSIGNED NOT NULL, id VARBINARY(255) NOT NULL,
  PRIMARY KEY (topic, due, seq)
) ENGINE=InnoDB
--;
CREATE TABLE IF NOT EXISTS {{p}}q_ready (
  topic VARBINARY(255) NOT NULL, due BIGINT NOT NULL, seq BIGINT UNSIGNED NOT NULL, id VARBINARY(255) NOT NULL,
  PRIMARY KEY (topic, due, seq)
) ENGINE=InnoDB
--;
CREATE TABLE IF NOT EXISTS {{p}}q_inflight (
  lease_until BIGINT NOT NULL, seq BIGINT UNSIGNED NOT NULL, topic VARBINARY(255) NOT NULL, id VARBINARY(255) NOT NULL,
  PRIMARY KEY (lease_until, seq),
  KEY topic_lease (topic, lease_until)
) ENGINE=InnoDB
--;
CREATE TABLE IF NOT EXISTS {{p}}q_dead (
  topic VARBINARY(255) NOT NULL, dead_at BIGINT NOT NULL, seq BIGINT UNSIGNED NOT NULL, id VARBINARY(255) NOT NULL,
  PRIMARY KEY (topic, dead_at, seq)
) ENGINE=InnoDB
--;
CREATE TABLE IF NOT EXISTS {{p}}tombstone (
  topic        VARBINARY(255) NOT NULL,
  id           VARBINARY(255) NOT NULL,
  seq          BIGINT UNSIGNED NOT NULL,
  acked_at     BIGINT NOT NULL,
  headers      BLOB,
  due          BIGINT NOT NULL,
  created      BIGINT NOT NULL,
  deliveries   INT NOT NULL,
  failures     INT NOT NULL,
  max_attempts INT NOT NULL,
  last_error   TEXT,
  PRIMARY KEY (topic, id),
  KEY acked (acked_at, seq)
) ENGINE=InnoDB
--;
CREATE TABLE IF NOT EXISTS {{p}}topic (
  name      VARBINARY(255) NOT NULL PRIMARY KEY,
  settings  BLOB,
  scheduled BIGINT NOT NULL DEFAULT 0,
  ready     BIGINT NOT NULL DEFAULT 0,
  inflight  BIGINT NOT NULL DEFAULT 0,
  dead      BIGINT NOT NULL DEFAULT 0,
  acked     BIGINT NOT NULL DEFAULT 0,
  -- ver is bumped by every change that makes a message of the topic
  -- scheduled or ready; servers poll it to wake (MySQL has no NOTIFY).
  ver       BIGINT NOT NULL DEFAULT 0
) ENGINE=InnoDB
--;
CREATE TABLE IF NOT EXISTS {{p}}schedule (
  name      VARBINARY(255) NOT NULL PRIMARY KEY,
  spec      BLOB NOT NULL,
  last_tick BIGINT NOT NULL,
  created   BIGINT NOT NULL,
  updated   BIGINT NOT NULL
) ENGINE=InnoDB
--;
-- Token buckets of topics' rate limits, on the database's clock, so a
-- limit holds across servers.
CREATE TABLE IF NOT EXISTS {{p}}rate_bucket (
  topic  VARBINARY(255) NOT NULL PRIMARY KEY,
  tokens DOUBLE NOT NULL,
  ts     BIGINT NOT NULL
) ENGINE=InnoDB
