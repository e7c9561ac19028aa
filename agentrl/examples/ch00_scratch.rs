fn main() {
// CELL 1
agentrl::book::setup();
use tch::{Device, IndexOp, Kind, Tensor};

let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).reshape([2, 3]); // [2, 3]
println!("size {:?}, kind {:?}, device {:?}", x.size(), x.kind(), x.device());
println!("{:?}", Vec::<Vec<f32>>::try_from(&x).unwrap());
println!("=====");
// CELL 2
let zeros = Tensor::zeros([2, 3], (Kind::Float, Device::Cpu)); // [2, 3]
let steps = Tensor::arange(4, (Kind::Int64, Device::Cpu)); // [4]
let table = Tensor::from_slice2(&[[1i64, 2], [3, 4]]); // [2, 2]
let doubles = Tensor::from_slice(&[0.5, 1.5]); // [2], f64 literals give Kind::Double
let floats = doubles.to_kind(Kind::Float); // [2]
for (name, t) in [("zeros", &zeros), ("steps", &steps), ("table", &table), ("doubles", &doubles), ("floats", &floats)] {
    println!("{name:8} size {:?}  kind {:?}", t.size(), t.kind());
}
println!("=====");
// CELL 3
let bias = Tensor::from_slice(&[10.0f32, 20.0, 30.0]); // [3]
let shifted = &x + &bias; // [2, 3]  bias is broadcast over the rows
let scaled = &x * 2.0; // [2, 3]
let gram = x.matmul(&x.transpose(0, 1)); // [2, 2]  x @ x.T
println!("x + bias = {:?}", Vec::<Vec<f32>>::try_from(&shifted).unwrap());
println!("2 * x    = {:?}", Vec::<Vec<f32>>::try_from(&scaled).unwrap());
println!("x x^T    = {:?}", Vec::<Vec<f32>>::try_from(&gram).unwrap());
println!("=====");
// CELL 4
let row = x.get(1); // [3]     x[1]
let col = x.i((.., 2)); // [2]     x[:, 2]
let mid = x.narrow(1, 1, 2); // [2, 2]  x[:, 1:3]
let row_sum = x.sum_dim_intlist(1, false, Kind::Float); // [2]     x.sum(dim=1)
let col_mean = x.mean_dim(0, true, Kind::Float); // [1, 3]  x.mean(dim=0, keepdim=True)
let total = x.sum(Kind::Float); // []      x.sum()
println!("row {:?}  col {:?}  mid {:?}", Vec::<f32>::try_from(&row).unwrap(), Vec::<f32>::try_from(&col).unwrap(), Vec::<Vec<f32>>::try_from(&mid).unwrap());
println!("row_sum {:?}  col_mean {:?} {:?}  total {}", Vec::<f32>::try_from(&row_sum).unwrap(), col_mean.size(), Vec::<Vec<f32>>::try_from(&col_mean).unwrap(), total.double_value(&[]));
println!("=====");
// CELL 5
let logits = Tensor::from_slice(&[
    2.0f32, 0.5, -1.0, /**/ 0.0, 1.0, 0.0, /**/ 1.0, 1.0, 1.0, // sequence 0
    0.5, 0.5, 2.0, /**/ -1.0, 0.0, 3.0, /**/ 0.0, 0.0, 0.0, // sequence 1
])
.reshape([2, 3, 3])
.set_requires_grad(true); // [G, T, V]
let tokens = Tensor::from_slice2(&[[0i64, 1, 2], [2, 2, 0]]); // [G, T]
let mask = Tensor::from_slice2(&[[1.0f32, 1.0, 0.0], [1.0, 1.0, 1.0]]); // [G, T]
let logp = logits.log_softmax(-1, Kind::Float); // [G, T, V]
let chosen = logp.gather(2, &tokens.unsqueeze(-1), false).squeeze_dim(-1); // [G, T]
let token_mean = (&chosen * &mask).sum(Kind::Float) / mask.sum(Kind::Float); // []
let seq_mean = ((&chosen * &mask).sum_dim_intlist(1, false, Kind::Float)
    / mask.sum_dim_intlist(1, false, Kind::Float))
.mean(Kind::Float); // []
println!("chosen log-probs {:.4?}", Vec::<Vec<f32>>::try_from(&chosen).unwrap());
println!("masked token mean    {:.4}", token_mean.double_value(&[]));
println!("mean of sequence means {:.4}", seq_mean.double_value(&[]));
println!("=====");
// CELL 6
let loss = token_mean.neg(); // []
loss.backward();
let grad = logits.grad(); // [G, T, V]
println!("d loss / d logits, sequence 0: {:.4?}", Vec::<Vec<f32>>::try_from(&grad.get(0)).unwrap());
let formula = tch::no_grad(|| {
    (logp.exp() - tokens.one_hot(3).to_kind(Kind::Float)) * mask.unsqueeze(-1) / mask.sum(Kind::Float)
}); // [G, T, V]
println!("matches (softmax - one_hot) * m / sum(m): {}", grad.allclose(&formula, 1e-6, 1e-6, false));
println!("requires_grad: logp {}, formula {}", logp.requires_grad(), formula.requires_grad());
println!("=====");
// CELL 7
tch::manual_seed(0);
let picks = Tensor::randint(6, [6], (Kind::Int64, Device::Cpu)); // [6]
let more = Tensor::randint(6, [6], (Kind::Int64, Device::Cpu)); // [6]
tch::manual_seed(0);
let again = Tensor::randint(6, [6], (Kind::Int64, Device::Cpu)); // [6]
println!("seed 0, first draw  {:?}", Vec::<i64>::try_from(&picks).unwrap());
println!("seed 0, second draw {:?}", Vec::<i64>::try_from(&more).unwrap());
println!("reseeded draw equals the first: {}", again.equal(&picks));
let probs = tch::no_grad(|| logp.get(0).get(1).exp()); // [V]
let sampled = probs.multinomial(12, true); // [12]
println!("probs {:.4?}", Vec::<f32>::try_from(&probs).unwrap());
println!("12 samples {:?}", Vec::<i64>::try_from(&sampled).unwrap());
println!("=====");
// CELL 8
let sums: Vec<f32> = Vec::try_from(&row_sum).unwrap();
let mean: f64 = token_mean.double_value(&[]);
let second_token: i64 = tokens.int64_value(&[1, 0]);
let everything = f64::try_from(&total).unwrap();
println!("{sums:?} {mean:.4} {second_token} {everything}");
println!("=====");
// CELL 9
println!("libtorch threads: {}", tch::get_num_threads());
let (a, b, c) = (1.0e8f32, 1.0f32, -1.0e8f32);
println!("(a + b) + c = {}, (a + c) + b = {}", (a + b) + c, (a + c) + b);
}
