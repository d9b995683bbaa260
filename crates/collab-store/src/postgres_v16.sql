-- Version 16 (PostgreSQL only): `collab-lease acquire`, `release`, `renew`
-- and `break` decided in one statement each, by the functions below, with the exact
-- semantics of `leases::acquire_in`, `release_in`, `renew_in` and `break_in` (the Rust
-- statements stay, for SQLite and behind GIT_COLLAB_PG_LEASE_STATEMENTS=1).
-- Every name a function uses is a parameter (p_), a local (v_) or an output
-- column (o_), never a column's name, so no reference is ambiguous.

-- a + b, saturating at the ends of BIGINT (Rust's `saturating_add`);
-- NULL if either is NULL.
CREATE FUNCTION collab_sat_add(a BIGINT, b BIGINT) RETURNS BIGINT
LANGUAGE sql IMMUTABLE STRICT AS $$
SELECT CASE
    WHEN b > 0 THEN
        CASE WHEN a > 9223372036854775807 - b THEN 9223372036854775807 ELSE a + b END
    WHEN b < 0 THEN
        CASE WHEN a < (-9223372036854775807 - 1) - b THEN (-9223372036854775807 - 1)
             ELSE a + b END
    ELSE a
END
$$;

-- When a tenure acquired at p_acquired_at ends if its TTL is counted from
-- p_now: the TTL's end, capped by max_lifetime; NULL = never
-- (`leases::expiry`; LEAST skips NULLs as `earliest` does).
CREATE FUNCTION collab_lease_expiry(p_now BIGINT, p_acquired_at BIGINT, p_ttl BIGINT,
                                    p_max_lifetime BIGINT) RETURNS BIGINT
LANGUAGE sql IMMUTABLE AS $$
SELECT LEAST(collab_sat_add(p_now, p_ttl), collab_sat_add(p_acquired_at, p_max_lifetime))
$$;

-- Unix seconds as the JSON value `leases::rfc3339` gives: an RFC 3339 UTC
-- string as chrono writes it (a sign and at least four digits for a year
-- outside 0..=9999), `null` for NULL and outside chrono's range.
CREATE FUNCTION collab_json_time(s BIGINT) RETURNS TEXT
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_days BIGINT;
    v_secs BIGINT;
    v_z BIGINT;
    v_era BIGINT;
    v_doe BIGINT;
    v_yoe BIGINT;
    v_y BIGINT;
    v_doy BIGINT;
    v_mp BIGINT;
    v_d BIGINT;
    v_m BIGINT;
    v_year TEXT;
BEGIN
    -- chrono's range: -262143-01-01T00:00:00Z to +262142-12-31T23:59:59Z.
    IF s IS NULL OR s < -8334601228800 OR s > 8210266876799 THEN
        RETURN 'null';
    END IF;
    v_days := s / 86400;
    IF s % 86400 < 0 THEN
        v_days := v_days - 1;
    END IF;
    v_secs := s - v_days * 86400;
    -- Civil date from days since 1970-01-01 (proleptic Gregorian).
    v_z := v_days + 719468;
    v_era := (CASE WHEN v_z >= 0 THEN v_z ELSE v_z - 146096 END) / 146097;
    v_doe := v_z - v_era * 146097;
    v_yoe := (v_doe - v_doe / 1460 + v_doe / 36524 - v_doe / 146096) / 365;
    v_y := v_yoe + v_era * 400;
    v_doy := v_doe - (365 * v_yoe + v_yoe / 4 - v_yoe / 100);
    v_mp := (5 * v_doy + 2) / 153;
    v_d := v_doy - (153 * v_mp + 2) / 5 + 1;
    v_m := CASE WHEN v_mp < 10 THEN v_mp + 3 ELSE v_mp - 9 END;
    IF v_m <= 2 THEN
        v_y := v_y + 1;
    END IF;
    v_year := abs(v_y)::text;
    IF length(v_year) < 4 THEN
        v_year := lpad(v_year, 4, '0');
    END IF;
    IF v_y < 0 THEN
        v_year := '-' || v_year;
    ELSIF v_y > 9999 THEN
        v_year := '+' || v_year;
    END IF;
    RETURN '"' || v_year || '-' || lpad(v_m::text, 2, '0') || '-' || lpad(v_d::text, 2, '0')
        || 'T' || lpad((v_secs / 3600)::text, 2, '0')
        || ':' || lpad((v_secs % 3600 / 60)::text, 2, '0')
        || ':' || lpad((v_secs % 60)::text, 2, '0') || 'Z"';
END
$$;

-- A text as a JSON value, as serde_json writes it (`null` for NULL).
CREATE FUNCTION collab_json_text(t TEXT) RETURNS TEXT
LANGUAGE sql IMMUTABLE AS $$
SELECT COALESCE(to_json(t)::text, 'null')
$$;

-- Take the issue's lock (`PgConnection::lock_issue`, the same key): tried
-- (false: another transaction holds it) or waited for.
CREATE FUNCTION collab_lock_issue(p_repo TEXT, p_issue TEXT, p_try BOOLEAN) RETURNS BOOLEAN
LANGUAGE plpgsql AS $$
BEGIN
    IF p_try THEN
        RETURN pg_try_advisory_xact_lock(
            hashtextextended(length(p_repo) || ':' || p_repo || p_issue, 0));
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended(length(p_repo) || ':' || p_repo || p_issue, 0));
    RETURN true;
END
$$;

-- Append an event (`event_log::append` for an event with a repository):
-- p_seq is the provisional number the caller handed in, NULL to take the
-- next from `counters` (outside a transaction). A repository without an id
-- yet gets one here (`repos::id_of`): 32 random hex digits, as
-- `repo_ids::new_repo_id` writes them, made only when the row is.
CREATE FUNCTION collab_event_append(p_seq BIGINT, p_at BIGINT, p_type TEXT, p_repo TEXT,
                                    p_object TEXT, p_actor TEXT, p_payload TEXT) RETURNS VOID
LANGUAGE plpgsql AS $$
DECLARE
    v_seq BIGINT := p_seq;
    v_repo_id TEXT;
BEGIN
    IF v_seq IS NULL THEN
        UPDATE counters SET value = value + 1 WHERE name = 'events' RETURNING value INTO v_seq;
    END IF;
    INSERT INTO events (seq, at, type, repo, repo_id, object_id, actor, payload)
    SELECT v_seq, p_at, p_type, p_repo, r.id, p_object, p_actor, p_payload
    FROM repositories r WHERE r.name = p_repo;
    IF FOUND THEN
        RETURN;
    END IF;
    INSERT INTO repositories (id, name, created_at, deleted_at)
    VALUES (translate(gen_random_uuid()::text, '-', ''), p_repo, p_at, NULL)
    ON CONFLICT (name) DO NOTHING;
    SELECT r.id INTO v_repo_id FROM repositories r WHERE r.name = p_repo;
    INSERT INTO events (seq, at, type, repo, repo_id, object_id, actor, payload)
    VALUES (v_seq, p_at, p_type, p_repo, v_repo_id, p_object, p_actor, p_payload);
END
$$;

-- After an expired tenure's row is gone: the lock delay (counted from the
-- moment it ended) and its `lease.expired` event (`leases::end_by_expiry`).
CREATE FUNCTION collab_lease_end_by_expiry(p_repo TEXT, p_issue TEXT, p_holder TEXT,
                                           p_token BIGINT, p_acquired_at BIGINT,
                                           p_expires_at BIGINT, p_max_lifetime BIGINT,
                                           p_lock_delay BIGINT, p_now BIGINT, p_seq BIGINT)
RETURNS VOID
LANGUAGE plpgsql AS $$
DECLARE
    v_locked_until BIGINT;
    v_by_lifetime BOOLEAN;
BEGIN
    IF p_lock_delay > 0 THEN
        v_locked_until := collab_sat_add(COALESCE(p_expires_at, p_now), p_lock_delay);
        UPDATE lease_tokens SET locked_until = v_locked_until
        WHERE repo = p_repo AND issue_id = p_issue;
    END IF;
    v_by_lifetime := COALESCE(p_max_lifetime IS NOT NULL
        AND p_expires_at = collab_sat_add(p_acquired_at, p_max_lifetime), false);
    PERFORM collab_event_append(p_seq, p_now, 'lease.expired', p_repo, p_issue, NULL,
        '{"expires_at":' || collab_json_time(p_expires_at)
        || ',"holder":' || collab_json_text(p_holder)
        || ',"locked_until":' || collab_json_time(v_locked_until)
        || ',"reason":' || CASE WHEN v_by_lifetime THEN '"max_lifetime"' ELSE '"ttl"' END
        || ',"token":' || p_token || '}');
END
$$;

-- What every lease function does first (`leases::lock_issue` and
-- `leases::live_row`): the issue's lock (o_busy: it was tried and another
-- transaction holds it; nothing else done), then its live lease with its
-- `lease_tokens` row (o_holder NULL: none). An expired tenure found is
-- deleted and ended here with its `lease.expired` event (number p_seq) and
-- lock delay (o_ended).
CREATE FUNCTION collab_lease_live(p_repo TEXT, p_issue TEXT, p_max_lifetime BIGINT,
                                  p_lock_delay BIGINT, p_now BIGINT, p_seq BIGINT,
                                  p_try BOOLEAN,
                                  OUT o_busy BOOLEAN, OUT o_ended BOOLEAN, OUT o_holder TEXT,
                                  OUT o_token BIGINT, OUT o_acquired_at BIGINT,
                                  OUT o_expires_at BIGINT, OUT o_renewed_at BIGINT,
                                  OUT o_note TEXT, OUT o_transitions BIGINT)
LANGUAGE plpgsql AS $$
BEGIN
    o_ended := false;
    o_busy := NOT collab_lock_issue(p_repo, p_issue, p_try);
    IF o_busy THEN
        RETURN;
    END IF;
    SELECT l.holder, l.token, l.acquired_at, l.expires_at, l.renewed_at, l.note, t.transitions
    INTO o_holder, o_token, o_acquired_at, o_expires_at, o_renewed_at, o_note, o_transitions
    FROM leases l JOIN lease_tokens t ON t.repo = l.repo AND t.issue_id = l.issue_id
    WHERE l.repo = p_repo AND l.issue_id = p_issue;
    IF FOUND AND o_expires_at IS NOT NULL AND o_expires_at <= p_now THEN
        DELETE FROM leases WHERE repo = p_repo AND issue_id = p_issue;
        PERFORM collab_lease_end_by_expiry(p_repo, p_issue, o_holder, o_token, o_acquired_at,
            o_expires_at, p_max_lifetime, p_lock_delay, p_now, p_seq);
        o_ended := true;
        o_holder := NULL;
        o_token := NULL;
        o_acquired_at := NULL;
        o_expires_at := NULL;
        o_renewed_at := NULL;
        o_note := NULL;
        o_transitions := NULL;
    END IF;
END
$$;

-- `collab-lease acquire` (`leases::acquire_in` after its TTL check): the
-- issue's lock, its live row (an expired one ended with its event), then
-- an idempotent re-acquire, a refusal, or a new tenure unless a lock delay
-- protects the issue. p_seq1 and p_seq2 are the provisional numbers of the
-- (at most two) events, in append order. o_outcome: 'acquired' (a new
-- tenure), 'reacquired', 'held', 'locked' (o_holder, o_until), or 'busy'
-- (the lock was tried and another transaction holds it: nothing done);
-- o_events: how many events were appended.
CREATE FUNCTION collab_lease_acquire(p_repo TEXT, p_issue TEXT, p_holder TEXT, p_ttl BIGINT,
                                     p_note TEXT, p_max_lifetime BIGINT, p_lock_delay BIGINT,
                                     p_now BIGINT, p_seq1 BIGINT, p_seq2 BIGINT, p_try BOOLEAN)
RETURNS TABLE (o_outcome TEXT, o_holder TEXT, o_token BIGINT, o_acquired_at BIGINT,
               o_expires_at BIGINT, o_renewed_at BIGINT, o_note TEXT,
               o_transitions BIGINT, o_until BIGINT, o_events BIGINT)
LANGUAGE plpgsql AS $$
DECLARE
    v_cur RECORD;
    v_seq BIGINT := p_seq1;
    v_events BIGINT := 0;
    v_token BIGINT;
    v_transitions BIGINT;
    v_expires BIGINT;
    v_note TEXT;
BEGIN
    SELECT * INTO v_cur
    FROM collab_lease_live(p_repo, p_issue, p_max_lifetime, p_lock_delay, p_now, p_seq1, p_try);
    IF v_cur.o_busy THEN
        o_outcome := 'busy';
        o_events := 0;
        RETURN NEXT;
        RETURN;
    END IF;
    IF v_cur.o_ended THEN
        v_events := 1;
        v_seq := p_seq2;
    END IF;
    IF v_cur.o_holder = p_holder THEN
        -- The holder's re-acquire moves the expiry (`leases::extend`).
        v_expires := collab_lease_expiry(p_now, v_cur.o_acquired_at, p_ttl, p_max_lifetime);
        v_note := COALESCE(p_note, v_cur.o_note);
        UPDATE leases SET expires_at = v_expires, renewed_at = p_now, note = v_note
        WHERE repo = p_repo AND issue_id = p_issue;
        PERFORM collab_event_append(v_seq, p_now, 'lease.renewed', p_repo, p_issue,
            v_cur.o_holder,
            '{"expires_at":' || collab_json_time(v_expires)
            || ',"holder":' || collab_json_text(v_cur.o_holder)
            || ',"note":' || collab_json_text(v_note)
            || ',"token":' || v_cur.o_token || '}');
        o_outcome := 'reacquired';
        o_holder := v_cur.o_holder;
        o_token := v_cur.o_token;
        o_acquired_at := v_cur.o_acquired_at;
        o_expires_at := v_expires;
        o_renewed_at := p_now;
        o_note := v_note;
        o_transitions := v_cur.o_transitions;
        o_events := v_events + 1;
        RETURN NEXT;
        RETURN;
    END IF;
    IF v_cur.o_holder IS NOT NULL THEN
        o_outcome := 'held';
        o_holder := v_cur.o_holder;
        o_expires_at := v_cur.o_expires_at;
        o_events := v_events;
        RETURN NEXT;
        RETURN;
    END IF;
    -- A new tenure (`leases::begin_tenure`): one statement bumps the token,
    -- counts a holder change and checks the lock delay.
    INSERT INTO lease_tokens AS t (repo, issue_id, last_token, transitions, last_holder)
    VALUES (p_repo, p_issue, 1, 0, p_holder)
    ON CONFLICT (repo, issue_id) DO UPDATE SET
        last_token = t.last_token + 1,
        transitions = t.transitions + CASE
            WHEN t.last_holder IS NULL OR t.last_holder = excluded.last_holder THEN 0 ELSE 1 END,
        last_holder = excluded.last_holder,
        locked_until = NULL
    WHERE t.locked_until IS NULL
       OR t.locked_until <= p_now
       OR t.last_holder = excluded.last_holder
    RETURNING t.last_token, t.transitions INTO v_token, v_transitions;
    IF v_token IS NULL THEN
        SELECT t.last_holder, t.locked_until INTO o_holder, o_until
        FROM lease_tokens t WHERE t.repo = p_repo AND t.issue_id = p_issue;
        o_outcome := 'locked';
        o_events := v_events;
        RETURN NEXT;
        RETURN;
    END IF;
    v_expires := collab_lease_expiry(p_now, p_now, p_ttl, p_max_lifetime);
    INSERT INTO leases (repo, issue_id, holder, token, acquired_at, expires_at, note)
    VALUES (p_repo, p_issue, p_holder, v_token, p_now, v_expires, p_note);
    PERFORM collab_event_append(v_seq, p_now, 'lease.acquired', p_repo, p_issue, p_holder,
        '{"acquired_at":' || collab_json_time(p_now)
        || ',"expires_at":' || collab_json_time(v_expires)
        || ',"holder":' || collab_json_text(p_holder)
        || ',"note":' || collab_json_text(p_note)
        || ',"token":' || v_token
        || ',"transitions":' || v_transitions || '}');
    o_outcome := 'acquired';
    o_holder := p_holder;
    o_token := v_token;
    o_acquired_at := p_now;
    o_expires_at := v_expires;
    o_note := p_note;
    o_transitions := v_transitions;
    o_events := v_events + 1;
    RETURN NEXT;
END
$$;

-- `collab-lease release` (`leases::release_in`): o_outcome 'released'
-- (also when nothing was live: an expired tenure found is ended with its
-- event), 'not_holder' (o_holder has the live lease), or 'busy'.
CREATE FUNCTION collab_lease_release(p_repo TEXT, p_issue TEXT, p_holder TEXT,
                                     p_max_lifetime BIGINT, p_lock_delay BIGINT, p_now BIGINT,
                                     p_seq BIGINT, p_try BOOLEAN)
RETURNS TABLE (o_outcome TEXT, o_holder TEXT, o_events BIGINT)
LANGUAGE plpgsql AS $$
DECLARE
    v_cur RECORD;
BEGIN
    SELECT * INTO v_cur
    FROM collab_lease_live(p_repo, p_issue, p_max_lifetime, p_lock_delay, p_now, p_seq, p_try);
    IF v_cur.o_busy THEN
        o_outcome := 'busy';
        o_events := 0;
    ELSIF v_cur.o_ended THEN
        o_outcome := 'released';
        o_events := 1;
    ELSIF v_cur.o_holder IS NULL THEN
        o_outcome := 'released';
        o_events := 0;
    ELSIF v_cur.o_holder <> p_holder THEN
        o_outcome := 'not_holder';
        o_holder := v_cur.o_holder;
        o_events := 0;
    ELSE
        -- The token's high-water mark stays in lease_tokens.
        DELETE FROM leases WHERE repo = p_repo AND issue_id = p_issue;
        PERFORM collab_event_append(p_seq, p_now, 'lease.released', p_repo, p_issue, p_holder,
            '{"holder":' || collab_json_text(p_holder)
            || ',"token":' || v_cur.o_token || '}');
        o_outcome := 'released';
        o_events := 1;
    END IF;
    RETURN NEXT;
END
$$;

-- `collab-lease renew` (`leases::renew_in` after its TTL check): o_outcome
-- 'renewed' (the lease's columns), 'not_holder' (o_holder: the live
-- lease's holder, NULL when nothing is live; an expired tenure found is
-- ended with its event), or 'busy'.
CREATE FUNCTION collab_lease_renew(p_repo TEXT, p_issue TEXT, p_holder TEXT, p_ttl BIGINT,
                                   p_note TEXT, p_max_lifetime BIGINT, p_lock_delay BIGINT,
                                   p_now BIGINT, p_seq BIGINT, p_try BOOLEAN)
RETURNS TABLE (o_outcome TEXT, o_holder TEXT, o_token BIGINT, o_acquired_at BIGINT,
               o_expires_at BIGINT, o_renewed_at BIGINT, o_note TEXT,
               o_transitions BIGINT, o_events BIGINT)
LANGUAGE plpgsql AS $$
DECLARE
    v_cur RECORD;
    v_expires BIGINT;
    v_note TEXT;
BEGIN
    SELECT * INTO v_cur
    FROM collab_lease_live(p_repo, p_issue, p_max_lifetime, p_lock_delay, p_now, p_seq, p_try);
    IF v_cur.o_busy THEN
        o_outcome := 'busy';
        o_events := 0;
        RETURN NEXT;
        RETURN;
    END IF;
    IF v_cur.o_holder IS NULL OR v_cur.o_holder <> p_holder THEN
        o_outcome := 'not_holder';
        o_holder := v_cur.o_holder;
        o_events := CASE WHEN v_cur.o_ended THEN 1 ELSE 0 END;
        RETURN NEXT;
        RETURN;
    END IF;
    v_expires := collab_lease_expiry(p_now, v_cur.o_acquired_at, p_ttl, p_max_lifetime);
    v_note := COALESCE(p_note, v_cur.o_note);
    UPDATE leases SET expires_at = v_expires, renewed_at = p_now, note = v_note
    WHERE repo = p_repo AND issue_id = p_issue;
    PERFORM collab_event_append(p_seq, p_now, 'lease.renewed', p_repo, p_issue, v_cur.o_holder,
        '{"expires_at":' || collab_json_time(v_expires)
        || ',"holder":' || collab_json_text(v_cur.o_holder)
        || ',"note":' || collab_json_text(v_note)
        || ',"token":' || v_cur.o_token || '}');
    o_outcome := 'renewed';
    o_holder := v_cur.o_holder;
    o_token := v_cur.o_token;
    o_acquired_at := v_cur.o_acquired_at;
    o_expires_at := v_expires;
    o_renewed_at := p_now;
    o_note := v_note;
    o_transitions := v_cur.o_transitions;
    o_events := 1;
    RETURN NEXT;
END
$$;

-- `collab-lease break` (`leases::break_in`): o_outcome 'broken' (the
-- tenure that ended, by p_by for p_reason), 'not_held' (nothing live; an
-- expired tenure found is ended with its event), or 'busy'.
CREATE FUNCTION collab_lease_break(p_repo TEXT, p_issue TEXT, p_by TEXT, p_reason TEXT,
                                   p_max_lifetime BIGINT, p_lock_delay BIGINT, p_now BIGINT,
                                   p_seq BIGINT, p_try BOOLEAN)
RETURNS TABLE (o_outcome TEXT, o_holder TEXT, o_token BIGINT, o_acquired_at BIGINT,
               o_expires_at BIGINT, o_renewed_at BIGINT, o_note TEXT,
               o_transitions BIGINT, o_events BIGINT)
LANGUAGE plpgsql AS $$
DECLARE
    v_cur RECORD;
BEGIN
    SELECT * INTO v_cur
    FROM collab_lease_live(p_repo, p_issue, p_max_lifetime, p_lock_delay, p_now, p_seq, p_try);
    IF v_cur.o_busy THEN
        o_outcome := 'busy';
        o_events := 0;
        RETURN NEXT;
        RETURN;
    END IF;
    IF v_cur.o_holder IS NULL THEN
        o_outcome := 'not_held';
        o_events := CASE WHEN v_cur.o_ended THEN 1 ELSE 0 END;
        RETURN NEXT;
        RETURN;
    END IF;
    DELETE FROM leases WHERE repo = p_repo AND issue_id = p_issue;
    PERFORM collab_event_append(p_seq, p_now, 'lease.broken', p_repo, p_issue, p_by,
        '{"by":' || collab_json_text(p_by)
        || ',"holder":' || collab_json_text(v_cur.o_holder)
        || ',"reason":' || collab_json_text(p_reason)
        || ',"token":' || v_cur.o_token || '}');
    o_outcome := 'broken';
    o_holder := v_cur.o_holder;
    o_token := v_cur.o_token;
    o_acquired_at := v_cur.o_acquired_at;
    o_expires_at := v_cur.o_expires_at;
    o_renewed_at := v_cur.o_renewed_at;
    o_note := v_cur.o_note;
    o_transitions := v_cur.o_transitions;
    o_events := 1;
    RETURN NEXT;
END
$$;

-- One lease operation's answer in a call of collab_lease_group: the
-- columns of the operation's own function (a release's holder and events;
-- NULL where its function has no such column), and `error`, the SQLSTATE
-- of an operation that failed (outcome 'error'; nothing of it was kept).
CREATE TYPE collab_lease_answer AS (
    outcome TEXT,
    holder TEXT,
    token BIGINT,
    acquired_at BIGINT,
    expires_at BIGINT,
    renewed_at BIGINT,
    note TEXT,
    transitions BIGINT,
    until BIGINT,
    events BIGINT,
    error TEXT
);

-- A group of lease operations, each on an issue no other of them decides,
-- in one call (the writer's lease groups: one prepared statement, one round
-- trip): operation k is p_kinds[k] ('acquire', 'renew', 'release',
-- 'break') with its own arguments at [k] (p_holders: the breaker for a
-- break) and the group's policy, time and try. They run in order inside one
-- subtransaction. An operation that fails (a CHECK, a lock_timeout) rolls
-- it back, is answered 'error' with its SQLSTATE, and the others run again
-- without it, in the same call: a failure fails alone, and never aborts
-- the caller's transaction. The answers come out in order, one per
-- operation, only after the last run has succeeded.
CREATE FUNCTION collab_lease_group(p_kinds TEXT[], p_repos TEXT[], p_issues TEXT[],
                                   p_holders TEXT[], p_ttls BIGINT[], p_notes TEXT[],
                                   p_reasons TEXT[], p_seq1 BIGINT[], p_seq2 BIGINT[],
                                   p_max_lifetime BIGINT, p_lock_delay BIGINT, p_now BIGINT,
                                   p_try BOOLEAN)
RETURNS SETOF collab_lease_answer
LANGUAGE plpgsql AS $$
DECLARE
    v_n INT := COALESCE(array_length(p_kinds, 1), 0);
    v_answers collab_lease_answer[];
    v_errors TEXT[];
    v_a collab_lease_answer;
    v_k INT;
BEGIN
    v_errors := array_fill(NULL::TEXT, ARRAY[v_n]);
    LOOP
        BEGIN
            v_k := 1;
            WHILE v_k <= v_n LOOP
                IF v_errors[v_k] IS NULL THEN
                    CASE p_kinds[v_k]
                    WHEN 'acquire' THEN
                        SELECT a.o_outcome, a.o_holder, a.o_token, a.o_acquired_at,
                               a.o_expires_at, a.o_renewed_at, a.o_note, a.o_transitions,
                               a.o_until, a.o_events, NULL::TEXT
                        INTO v_a
                        FROM collab_lease_acquire(p_repos[v_k], p_issues[v_k], p_holders[v_k],
                            p_ttls[v_k], p_notes[v_k], p_max_lifetime, p_lock_delay, p_now,
                            p_seq1[v_k], p_seq2[v_k], p_try) a;
                    WHEN 'release' THEN
                        SELECT a.o_outcome, a.o_holder, NULL::BIGINT, NULL::BIGINT,
                               NULL::BIGINT, NULL::BIGINT, NULL::TEXT, NULL::BIGINT,
                               NULL::BIGINT, a.o_events, NULL::TEXT
                        INTO v_a
                        FROM collab_lease_release(p_repos[v_k], p_issues[v_k], p_holders[v_k],
                            p_max_lifetime, p_lock_delay, p_now, p_seq1[v_k], p_try) a;
                    WHEN 'renew' THEN
                        SELECT a.o_outcome, a.o_holder, a.o_token, a.o_acquired_at,
                               a.o_expires_at, a.o_renewed_at, a.o_note, a.o_transitions,
                               NULL::BIGINT, a.o_events, NULL::TEXT
                        INTO v_a
                        FROM collab_lease_renew(p_repos[v_k], p_issues[v_k], p_holders[v_k],
                            p_ttls[v_k], p_notes[v_k], p_max_lifetime, p_lock_delay, p_now,
                            p_seq1[v_k], p_try) a;
                    WHEN 'break' THEN
                        SELECT a.o_outcome, a.o_holder, a.o_token, a.o_acquired_at,
                               a.o_expires_at, a.o_renewed_at, a.o_note, a.o_transitions,
                               NULL::BIGINT, a.o_events, NULL::TEXT
                        INTO v_a
                        FROM collab_lease_break(p_repos[v_k], p_issues[v_k], p_holders[v_k],
                            p_reasons[v_k], p_max_lifetime, p_lock_delay, p_now,
                            p_seq1[v_k], p_try) a;
                    END CASE;
                    v_answers[v_k] := v_a;
                END IF;
                v_k := v_k + 1;
            END LOOP;
            EXIT;
        EXCEPTION WHEN OTHERS THEN
            -- Everything this run did is undone; v_k is the operation that
            -- failed (variables are not rolled back).
            v_errors[v_k] := SQLSTATE;
        END;
    END LOOP;
    FOR v_i IN 1..v_n LOOP
        IF v_errors[v_i] IS NOT NULL THEN
            v_a := ROW('error', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0,
                       v_errors[v_i]);
            RETURN NEXT v_a;
        ELSE
            RETURN NEXT v_answers[v_i];
        END IF;
    END LOOP;
END
$$;
