"""FetchReach with HER: herl against Stable-Baselines3 in the same process.

Two measurements:

* ``speed``: env steps per second while learning, SAC+HER, [64, 64], batch 256, one gradient step
  per env step, for herl and SB3 (same hyperparameters), and the *floor*: a bare PyTorch SAC
  update of the same networks (CleanRL style: two critic MLPs, three Adam optimizers) on a fixed
  batch, plus one env step with a random action. herl's ratio to the floor says how much of the
  step is the engine's own overhead.
* ``success``: SAC+HER and TD3+HER success rate over 50 evaluation episodes at 3,000 env steps,
  for several seeds, herl and SB3 with the same zoo-like settings.

Usage::

    python benchmarks/fetch_reach.py speed [--steps 1000] [--repeats 3]
    python benchmarks/fetch_reach.py success [--seeds 0 1 2] [--steps 3000] [--no-sb3]
"""

from __future__ import annotations

import argparse
import platform
import time
import warnings

import gymnasium as gym
import numpy as np
import torch

warnings.filterwarnings("ignore")

ENV_ID = "FetchReach-v4"
COMMON = dict(learning_rate=1e-3, buffer_size=1_000_000, learning_starts=100, batch_size=256, tau=0.05, gamma=0.95,
              train_freq=1, gradient_steps=1, policy_kwargs=dict(net_arch=[64, 64]))
HER_KWARGS = dict(n_sampled_goal=4, goal_selection_strategy="future")


def make_env() -> gym.Env:
    import gymnasium_robotics

    gym.register_envs(gymnasium_robotics)
    return gym.make(ENV_ID)


def make_model(lib: str, algo: str, seed: int, env: gym.Env):
    """The same configuration in herl and in SB3."""
    if lib == "herl":
        import herl as lib_module
        from herl import HerReplayBuffer, NormalActionNoise
    else:
        import stable_baselines3 as lib_module
        from stable_baselines3 import HerReplayBuffer
        from stable_baselines3.common.noise import NormalActionNoise
    cls = getattr(lib_module, algo)
    # a fresh policy_kwargs per model: SB3 writes into the dict it is given
    kwargs = dict(COMMON, policy_kwargs=dict(COMMON["policy_kwargs"]), replay_buffer_class=HerReplayBuffer, replay_buffer_kwargs=dict(HER_KWARGS), seed=seed,
                  verbose=0, device="cpu")
    if algo == "TD3":
        n = env.action_space.shape[0]
        kwargs["action_noise"] = NormalActionNoise(np.zeros(n), 0.1 * np.ones(n))
    return cls("MultiInputPolicy", env, **kwargs)


def learning_speed(lib: str, steps: int) -> tuple[float, float]:
    """Env steps per second of wall time and of CPU time over ``steps`` steps, after learning has started.

    With one torch thread the process's CPU time is the time it actually ran, which stays meaningful
    when other processes share the cores (wall time then depends on their load).
    """
    model = make_model(lib, "SAC", 0, make_env())
    model.learn(COMMON["learning_starts"] + 200)
    start, cpu = time.perf_counter(), time.process_time()
    model.learn(steps, reset_num_timesteps=False)
    return steps / (time.perf_counter() - start), steps / (time.process_time() - cpu)


def floor_speed(steps: int) -> tuple[float, float, float]:
    """(steps/s, update ms, env step ms) of a bare PyTorch SAC update of the same networks plus one env step,
    in CPU time (see :func:`learning_speed`)."""
    from torch import nn

    obs_dim, act_dim, batch, hidden = 13, 4, 256, 64  # FetchReach: observation 10 + desired_goal 3; 4 actions

    def mlp(i: int, o: int) -> nn.Module:
        return nn.Sequential(nn.Linear(i, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, o))

    actor, q1, q2 = mlp(obs_dim, 2 * act_dim), mlp(obs_dim + act_dim, 1), mlp(obs_dim + act_dim, 1)
    q1_t, q2_t = mlp(obs_dim + act_dim, 1), mlp(obs_dim + act_dim, 1)
    q1_t.load_state_dict(q1.state_dict())
    q2_t.load_state_dict(q2.state_dict())
    log_alpha = torch.zeros(1, requires_grad=True)
    q_opt = torch.optim.Adam([*q1.parameters(), *q2.parameters()], lr=1e-3)
    a_opt = torch.optim.Adam(actor.parameters(), lr=1e-3)
    al_opt = torch.optim.Adam([log_alpha], lr=1e-3)
    obs, next_obs = torch.randn(batch, obs_dim), torch.randn(batch, obs_dim)
    actions, rewards, dones = torch.rand(batch, act_dim) * 2 - 1, -torch.ones(batch, 1), torch.zeros(batch, 1)

    def sample(x):
        mean, log_std = actor(x).chunk(2, -1)
        std = log_std.clamp(-20, 2).exp()
        dist = torch.distributions.Normal(mean, std)
        u = dist.rsample()
        a = torch.tanh(u)
        return a, (dist.log_prob(u) - torch.log(1 - a.pow(2) + 1e-6)).sum(-1, keepdim=True)

    def update():
        alpha = log_alpha.exp().detach()
        with torch.no_grad():
            na, nlp = sample(next_obs)
            nx = torch.cat([next_obs, na], 1)
            target = rewards + 0.95 * (1 - dones) * (torch.min(q1_t(nx), q2_t(nx)) - alpha * nlp)
        x = torch.cat([obs, actions], 1)
        q_loss = 0.5 * (nn.functional.mse_loss(q1(x), target) + nn.functional.mse_loss(q2(x), target))
        q_opt.zero_grad()
        q_loss.backward()
        q_opt.step()
        pi, lp = sample(obs)
        xp = torch.cat([obs, pi], 1)
        a_loss = (alpha * lp - torch.min(q1(xp), q2(xp))).mean()
        a_opt.zero_grad()
        a_loss.backward()
        a_opt.step()
        al_loss = -(log_alpha * (lp.detach() - act_dim)).mean()
        al_opt.zero_grad()
        al_loss.backward()
        al_opt.step()
        with torch.no_grad():
            for t, s in ((q1_t, q1), (q2_t, q2)):
                for pt, ps in zip(t.parameters(), s.parameters()):
                    pt.mul_(0.95).add_(ps, alpha=0.05)

    for _ in range(50):
        update()
    start = time.process_time()
    for _ in range(steps):
        update()
    update_s = (time.process_time() - start) / steps
    env = make_env()
    env.reset(seed=0)
    env.action_space.seed(0)
    start = time.process_time()
    for _ in range(steps):
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            env.reset()
    env_s = (time.process_time() - start) / steps
    return 1.0 / (update_s + env_s), update_s * 1e3, env_s * 1e3


def success_at(lib: str, algo: str, seed: int, steps: int, n_eval: int = 50) -> float:
    model = make_model(lib, algo, seed, make_env())
    model.learn(steps)
    eval_env = make_env()
    eval_env.reset(seed=10_000 + seed)
    if lib == "herl":
        from herl import evaluate_policy

        return evaluate_policy(model, eval_env, n_eval_episodes=n_eval, return_success_rate=True)[2]
    successes = []
    for _ in range(n_eval):
        obs, _ = eval_env.reset()
        done = False
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, _, terminated, truncated, info = eval_env.step(action)
            done = terminated or truncated
        successes.append(float(info["is_success"]))
    return float(np.mean(successes))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["speed", "success"])
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--algos", nargs="+", default=["SAC", "TD3"])
    parser.add_argument("--no-sb3", action="store_true")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    # One intra-op thread: for these small networks a second one gains a few percent on an idle machine,
    # while OpenMP threads on a busy one (other processes on the cores) made updates 25x slower here.
    torch.set_num_threads(1)
    print(f"# {platform.processor() or platform.machine()}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    libs = ["herl"] if args.no_sb3 else ["herl", "sb3"]
    if args.what == "speed":
        # interleaved repeats, medians: the machine may be shared, so no library gets a quiet moment alone
        steps = args.steps or 1000
        floors, walls, cpus = [], {lib: [] for lib in libs}, {lib: [] for lib in libs}
        for rep in range(args.repeats):
            floor, update_ms, env_ms = floor_speed(steps)
            floors.append(floor)
            print(f"[{rep}] floor (bare PyTorch SAC update {update_ms:.2f} ms + env step {env_ms:.2f} ms, CPU time): "
                  f"{floor:.0f} steps/s", flush=True)
            for lib in libs:
                wall, cpu = learning_speed(lib, steps)
                walls[lib].append(wall)
                cpus[lib].append(cpu)
                print(f"[{rep}] {lib}: {wall:.0f} steps/s wall, {cpu:.0f} steps/s CPU time, while learning", flush=True)
        floor = float(np.median(floors))
        print(f"median floor: {floor:.0f} steps/s (CPU time)")
        for lib in libs:
            wall, cpu = float(np.median(walls[lib])), float(np.median(cpus[lib]))
            print(f"median {lib}: {wall:.0f} steps/s wall, {cpu:.0f} steps/s CPU time ({cpu / floor:.0%} of the floor)")
        if "sb3" in walls:
            print(f"herl / sb3: {np.median(walls['herl']) / np.median(walls['sb3']):.2f}x wall, "
                  f"{np.median(cpus['herl']) / np.median(cpus['sb3']):.2f}x CPU time")
    else:
        steps = args.steps or 3000
        for algo in args.algos:
            for lib in libs:
                rates = []
                for seed in args.seeds:
                    start = time.perf_counter()
                    rates.append(success_at(lib, algo, seed, steps))
                    print(f"{algo}+HER {lib} seed {seed}: success {rates[-1]:.2f} at {steps} steps "
                          f"({time.perf_counter() - start:.0f} s)", flush=True)
                print(f"{algo}+HER {lib}: median success {np.median(rates):.2f} over seeds {args.seeds}", flush=True)


if __name__ == "__main__":
    main()
