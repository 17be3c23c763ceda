# Thread: https://github.com/daa233/generative-inpainting-pytorch/issues/38
# Title: "Error backward loss generator"
# What the thread shows: training the PyTorch port of DeepFill v1 (generative inpainting with contextual attention)
# fails at `losses['g'].backward()` in train.py with "[65536, 1], which is output 0 of TBackward, is at version 2;
# expected version 1": that is the critics' final Linear weight (transposed). train.py gets one losses dict from
# Trainer.forward() (critic losses on detached fakes, generator losses through the same localD/globalD), then
# updates D (backward, optimizer_d.step()) before building and backpropagating losses['g']; the D step rewrote the
# critic weights the generator's WGAN loss saved. The maintainer points later reports of the same error to a comment
# in this thread with the fix, and the follow-up thread (#62) spells it out: move optimizer_d.step() down to just
# before optimizer_g.step(), i.e. after losses['g'].backward().
# Kept from the thread's code: the package split (networks / trainer / train loop), Trainer.forward() returning the
# losses dict with wgan_d, wgan_gp, l1, ae, wgan_g, dis_forward() on concatenated real/fake batches, the WGAN-GP
# penalty, the n_critic schedule and the D-then-G update blocks in the loop. Added: tiny nets, 16x16 random images,
# one fixed 8x8 box mask, two iterations.
import torch

from .trainer import Trainer

torch.manual_seed(0)

config = {"lr": 1e-4, "image_shape": 16, "mask_shape": 8, "n_critic": 1, "wgan_gp_lambda": 10.0,
          "l1_loss_alpha": 1.2, "ae_loss_alpha": 1.2, "gan_loss_alpha": 0.001, "coarse_l1_alpha": 1.2,
          "global_wgan_loss_alpha": 1.0}


def main(iterations=2):
    trainer = Trainer(config)
    bbox = (4, 4, config["mask_shape"], config["mask_shape"])
    mask = torch.zeros(1, 1, 16, 16)
    mask[:, :, 4:12, 4:12] = 1.0
    for iteration in range(1, iterations + 1):
        ground_truth = torch.rand(2, 3, 16, 16) * 2 - 1
        x = ground_truth * (1.0 - mask)
        compute_g_loss = iteration % config["n_critic"] == 0
        losses, inpainted_result, offset_flow = trainer(x, bbox, mask.expand(2, -1, -1, -1), ground_truth,
                                                        compute_g_loss)

        # Update D
        trainer.optimizer_d.zero_grad()
        losses["d"] = losses["wgan_d"] + losses["wgan_gp"] * config["wgan_gp_lambda"]
        losses["d"].backward()
        trainer.optimizer_d.step()

        # Update G
        if compute_g_loss:
            trainer.optimizer_g.zero_grad()
            losses["g"] = losses["l1"] * config["l1_loss_alpha"] + losses["ae"] * config["ae_loss_alpha"] + \
                losses["wgan_g"] * config["gan_loss_alpha"]
            losses["g"].backward()
            trainer.optimizer_g.step()
        print(f"iteration {iteration}: d {losses['d'].item():.4f}")


if __name__ == "__main__":
    main()
